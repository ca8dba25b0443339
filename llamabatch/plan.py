"""Decode plans: how a group's prompts are cut into ``llama_decode`` calls.

Pure functions returning plain :class:`~llamabatch.backend.Span` lists, in the manner of
nano-vllm's ``schedule()``. Facts respected (llama.h, ``llama_decode``): at most
``n_batch`` tokens per call, one seq id per token, positions without gaps, logits only
where a token will be sampled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .backend import Span


def plan_prefill(prompts: Sequence[Sequence[int]], n_batch: int) -> Iterator[list[Span]]:
    """Lay the prompts of a group into decode calls of at most ``n_batch`` tokens.

    Prompt ``s`` goes to sequence ``s`` from position 0, in order; a prompt may be split
    across calls. Logits are requested on each prompt's last token only, so each sequence
    samples its first token right after the call that ended its prompt.

    Args:
        prompts: token ids per sequence, each non-empty.
        n_batch: most tokens per call (>= 1).

    Yields:
        one list of spans per ``llama_decode`` call, their token counts summing to
        ``<= n_batch`` and to ``> 0``.
    """
    chunk: list[Span] = []
    room = n_batch
    for seq_id, prompt in enumerate(prompts):
        pos, n = 0, len(prompt)
        while pos < n:
            take = min(room, n - pos)
            chunk.append(Span(seq_id, pos, prompt[pos:pos + take], pos + take == n))
            pos += take
            room -= take
            if room == 0:
                yield chunk
                chunk, room = [], n_batch
    if chunk:
        yield chunk
