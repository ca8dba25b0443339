"""What a grammar costs per decode step at B = 4: none vs lazily checked vs full chain.

Each round prefills 4 fresh prompts (ticket texts + a round number) in one
``llama_decode``, then times ``--steps`` decode steps of the 4 sequences (decode +
sampling of all four), in each of three modes, in an order that alternates from round to
round (the rounds of :func:`llamabatch.measure.rounds.run_rounds`):

- ``none``: the plain greedy chain (penalties → greedy);
- ``lazy``: the JSON-schema grammar checked on the picked token only (llamabatch's
  default, as llama.cpp's common sampler);
- ``full``: the grammar stage over the whole vocabulary at every step (``Llama``'s way).

Prints one JSON object: median ms per step of each mode and the ratios to ``none``.
Run: ``python benchmarks/grammar_cost.py [--model GGUF] [--rounds 6] [--steps 24]``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from functools import partial

from llamabatch.cli.options import script_parser
from llamabatch.llamacpp.batch import LlamaBatch
from llamabatch.llamacpp.context import BatchContext
from llamabatch.llamacpp.sampler import SeqSampler
from llamabatch.measure.rounds import order, run_rounds
from llamabatch.measure.stats import per_round
from llamabatch.measure.workloads import SUBJECTS
from llamabatch.model import default_model_path, load_llama
from llamabatch.params import SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"enum": ["billing", "bug", "account", "feature_request"]},
        "summary": {"type": "string"},
    },
    "required": ["label", "summary"],
}


def prompt(text: str, k: int) -> str:
    return (
        "<|im_start|>user\nTag this ticket as JSON with a label and a long summary "
        f"(ticket {k}):\n{text}<|im_end|>\n<|im_start|>assistant\n"
    )


def run_mode(llm, ctx, batch, mode: str, prompts: Sequence[str], steps: int) -> float:
    """Median seconds per step of 4 sequences in ``mode``."""
    params = SamplingParams(temperature=0.0, json_schema=None if mode == "none" else SCHEMA)
    samplers = [SeqSampler(llm, params, lazy_grammar=(mode != "full")) for _ in prompts]
    try:
        ctx.clear(range(len(prompts)))
        batch.clear()
        rows, pos = [], []
        for seq, text in enumerate(prompts):
            ids = llm.tokenize(text.encode(), add_bos=True, special=True)
            rows.append(batch.add_run(ids, 0, seq, True))
            pos.append(len(ids))
        assert ctx.decode(batch) == 0
        last = [s.sample(ctx, r) for s, r in zip(samplers, rows)]
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            batch.clear()
            rows = [
                batch.add_run([tok], p, seq, True) for seq, (tok, p) in enumerate(zip(last, pos))
            ]
            assert ctx.decode(batch) == 0
            last = [s.sample(ctx, r) for s, r in zip(samplers, rows)]
            times.append(time.perf_counter() - t0)
            pos = [p + 1 for p in pos]
        return statistics.median(times)
    finally:
        for s in samplers:
            s.close()


def main() -> None:
    ap = script_parser(__doc__, model=None, rounds=6, threads=2)
    ap.add_argument("--steps", type=int, default=24, help="decode steps per mode and round")
    args = ap.parse_args()
    llm = load_llama(args.model or default_model_path(), n_ctx=512, n_threads=args.threads)
    modes = ["none", "lazy", "full"]

    def texts(r: int, mode: str) -> list[str]:
        k = order(modes, r).index(mode)
        return [prompt(SUBJECTS[(r * 4 + i + k) % len(SUBJECTS)], r * 10 + k) for i in range(4)]

    with BatchContext(llm, slots=4, n_ctx_seq=512) as ctx, LlamaBatch(512, 4) as batch:
        paths = {
            m: partial(lambda items, tick, m: run_mode(llm, ctx, batch, m, items, args.steps), m=m)
            for m in modes
        }
        done = run_rounds(paths, texts, args.rounds)
    per_mode = {m: per_round(done, m, lambda p: p.result) for m in modes}
    med = {m: statistics.median(v) * 1000 for m, v in per_mode.items()}
    print(
        json.dumps(
            {
                "B": 4,
                "steps": args.steps,
                "rounds": args.rounds,
                "ms_per_step": {m: round(v, 2) for m, v in med.items()},
                "lazy_over_none": round(med["lazy"] / med["none"], 3),
                "full_over_none": round(med["full"] / med["none"], 3),
            }
        )
    )
    llm.close()


if __name__ == "__main__":
    main()
