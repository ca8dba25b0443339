"""What sharing a prompt prefix between slots costs, against prefilling it again.

Through llamabatch's own backend (no ctypes here): a batch context of ``--slots``
sequences (non-unified KV cache, ``--n-ctx-seq`` tokens each); a prefix of
``--prefix`` tokens (the workload S system prompt, cut or repeated to that length) is
prefilled into seq 0 (``llama_decode`` in chunks of n_batch), then copied to every
other sequence with ``LlamaBackend.copy_seq`` (``llama_state_seq_get_data`` +
``llama_state_seq_set_data``) and trimmed to the prefix; then one decode of one token
per sequence checks that the copies are usable. Medians of ``--repeats`` runs, in ms.

Usage::

    python benchmarks/prefix_copy.py --prefix 400 --slots 4 --json prefix_copy.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from llamabatch import SamplingParams
from llamabatch.engine.backend import Span
from llamabatch.llamacpp.backend import LlamaBackend
from llamabatch.measure.workloads import system_prompt_s

GREEDY = SamplingParams(temperature=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--prefix", type=int, default=400)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--n-ctx-seq", type=int, default=4096)
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import llama_cpp

    from llamabatch.model import default_model_path

    model = args.model or str(default_model_path())
    llm = llama_cpp.Llama(
        model_path=model,
        n_ctx=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    backend = LlamaBackend(llm)
    limits = backend.open_batch(args.slots, args.n_ctx_seq, args.n_batch)
    tokens = backend.tokenize(system_prompt_s(backend.tokenize))
    prefix = (tokens * (args.prefix // len(tokens) + 1))[: args.prefix]
    prefill_ms, copy_ms, step_ms = [], [], []
    for _ in range(args.repeats):
        backend.clear()
        for s in range(args.slots):
            backend.start_seq(s, GREEDY)
        t0 = time.perf_counter()
        for start in range(0, len(prefix) - 1, limits.n_batch):
            chunk = prefix[start : min(start + limits.n_batch, len(prefix) - 1)]
            backend.decode([Span(0, start, chunk, False)])
        prefill_ms.append(1000 * (time.perf_counter() - t0))
        for s in range(1, args.slots):
            t0 = time.perf_counter()
            backend.copy_seq(0, s)
            copy_ms.append(1000 * (time.perf_counter() - t0))
        t0 = time.perf_counter()
        backend.decode([Span(s, len(prefix) - 1, prefix[-1:], True) for s in range(args.slots)])
        step_ms.append(1000 * (time.perf_counter() - t0))
    backend.close()
    llm.close()
    out = {
        "prefix_tokens": args.prefix,
        "slots": args.slots,
        "n_ctx_seq": limits.n_ctx_seq,
        "threads": args.threads,
        "repeats": args.repeats,
        "prefill_prefix_ms": statistics.median(prefill_ms),
        "copy_seq_ms": statistics.median(copy_ms),
        "decode_step_after_copies_ms": statistics.median(step_ms),
        "all": {"prefill": prefill_ms, "copy": copy_ms, "step": step_ms},
    }
    print(json.dumps({k: v for k, v in out.items() if k != "all"}, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
