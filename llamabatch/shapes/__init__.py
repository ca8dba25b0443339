"""llama-cpp-python's and OpenAI's request and response shapes in llamabatch's terms, for
every path: :mod:`.sampling_map` (sampling arguments), :mod:`.requests` (calls, batch
request lines, server requests), :mod:`.responses` (response dicts, batch output lines,
records)."""
