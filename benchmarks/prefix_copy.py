"""What sharing a prompt prefix between slots costs, against prefilling it again.

Through llamabatch's own backend (no ctypes here): a batch context of ``--slots``
sequences (non-unified KV cache, ``--n-ctx-seq`` tokens each); a prefix of
``--prefix`` tokens (the workload S system prompt, cut or repeated to that length) is
prefilled into seq 0 (``llama_decode`` in chunks of n_batch), then copied to every
other sequence with ``LlamaBackend.copy_seq(...)`` (``llama_state_seq_get_data`` +
``llama_state_seq_set_data``) and trimmed to the prefix; then one decode of one token
per sequence checks that the copies are usable. Medians of ``--repeats`` runs (rounds of
:func:`llamabatch.measure.rounds.run_rounds`), in ms.

Usage::

    python benchmarks/prefix_copy.py --prefix 400 --slots 4 --json prefix_copy.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from llamabatch import SamplingParams
from llamabatch.cli.options import script_parser
from llamabatch.engine.step import Span
from llamabatch.llamacpp.backend import LlamaBackend
from llamabatch.measure.rounds import run_rounds
from llamabatch.measure.workloads import system_prompt_s
from llamabatch.model import default_model_path, load_llama

GREEDY = SamplingParams(temperature=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, model=None, n_ctx_seq=4096, n_batch=512, threads=2, json=None)
    ap.add_argument("--prefix", type=int, default=400, help="prefix tokens (default: 400)")
    ap.add_argument("--slots", type=int, default=4, help="sequences (default: 4)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds (default: 5)")
    args = ap.parse_args(argv)
    llm = load_llama(args.model or default_model_path(), n_ctx=512, n_threads=args.threads)
    backend = LlamaBackend(llm)
    limits = backend.open(args.slots, args.n_ctx_seq, args.n_batch)
    tokenize = backend.vocab.tokenize
    tokens = tokenize(system_prompt_s(tokenize))
    prefix = (tokens * (args.prefix // len(tokens) + 1))[: args.prefix]

    def once(items, tick) -> tuple[float, list[float], float]:
        """One repeat: (prefill ms, copy ms per copied slot, decode step ms)."""
        backend.clear()
        for s in range(args.slots):
            backend.start_seq(s, GREEDY)
        t0 = time.perf_counter()
        for start in range(0, len(prefix) - 1, limits.n_batch):
            chunk = prefix[start : min(start + limits.n_batch, len(prefix) - 1)]
            backend.run([Span(0, start, chunk, False)])
        prefill = 1000 * (time.perf_counter() - t0)
        copies = []
        for s in range(1, args.slots):
            t0 = time.perf_counter()
            backend.copy_seq(0, s)
            copies.append(1000 * (time.perf_counter() - t0))
        t0 = time.perf_counter()
        backend.run([Span(s, len(prefix) - 1, prefix[-1:], True) for s in range(args.slots)])
        return prefill, copies, 1000 * (time.perf_counter() - t0)

    rounds = run_rounds({"copy": once}, lambda r, name: [r], args.repeats)
    done = [r.passes[0].result for r in rounds]
    prefill_ms = [d[0] for d in done]
    copy_ms = [c for d in done for c in d[1]]
    step_ms = [d[2] for d in done]
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
