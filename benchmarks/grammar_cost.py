"""What a grammar costs per decode step at B = 4: none vs lazily checked vs full chain.

Each round prefills 4 fresh prompts (ticket texts + a round number) in one
``llama_decode``, then times ``--steps`` decode steps of the 4 sequences (decode +
sampling of all four), in each of three modes, in a rotating order:

- ``none``: the plain greedy chain (penalties → greedy);
- ``lazy``: the JSON-schema grammar checked on the picked token only (llamabatch's
  default, as llama.cpp's common sampler);
- ``full``: the grammar stage over the whole vocabulary at every step (``Llama``'s way).

Prints one JSON object: median ms per step of each mode and the ratios to ``none``.
Run: ``python benchmarks/grammar_cost.py [--model GGUF] [--rounds 6] [--steps 24]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from llamabatch.llamacpp.batch import LlamaBatch
from llamabatch.llamacpp.context import BatchContext
from llamabatch.llamacpp.sampler import SeqSampler
from llamabatch.params import SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"enum": ["billing", "bug", "account", "feature_request"]},
        "summary": {"type": "string"},
    },
    "required": ["label", "summary"],
}
TICKETS = [
    "I was charged twice this month.",
    "The app crashes when I open settings.",
    "Please add a dark mode.",
    "I cannot log in to my account.",
    "The invoice shows the wrong address.",
    "Export to CSV fails with an error.",
    "Can you support two-factor login?",
    "My password reset mail never arrives.",
]


def prompt(text: str, k: int) -> str:
    return (
        "<|im_start|>user\nTag this ticket as JSON with a label and a long summary "
        f"(ticket {k}):\n{text}<|im_end|>\n<|im_start|>assistant\n"
    )


def run_mode(llm, ctx, batch, mode: str, prompts: list[str], steps: int) -> float:
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import llama_cpp

    from llamabatch.model import default_model_path

    llm = llama_cpp.Llama(
        args.model or str(default_model_path()), n_ctx=512, n_threads=args.threads, verbose=False
    )
    modes = ["none", "lazy", "full"]
    per_mode: dict[str, list[float]] = {m: [] for m in modes}
    with BatchContext(llm, slots=4, n_ctx_seq=512) as ctx, LlamaBatch(512, 4) as batch:
        for r in range(args.rounds):
            order = modes[r % 3 :] + modes[: r % 3]
            for k, mode in enumerate(order):
                texts = [
                    prompt(TICKETS[(r * 4 + i + k) % len(TICKETS)], r * 10 + k) for i in range(4)
                ]
                per_mode[mode].append(run_mode(llm, ctx, batch, mode, texts, args.steps))
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
