"""create_completions against a loop of llm.create_completion: seconds per item, side by side.

SmolLM2-135M-Instruct (the default model, or ``--model``), ``--items`` fresh short chat
prompts per pass (``llamabatch.measure.workloads.tagged``: each pass its own tag, so no
pass reuses another's cached prompt), greedy, ``--max-tokens`` reply tokens at most, the
two methods in alternating order each round (AB, BA, ...) after an untimed warm-up:

- ``create_completions``: ``llamabatch.create_completions``' method on one
  ``BatchGenerator(llm, slots=--slots)`` kept for the whole run;
- ``loop``: ``[llm.create_completion(p, ...) for p in prompts]`` on the same ``Llama``.

    python benchmarks/create_completions.py [--rounds 4] [--items 64] [--max-tokens 48]
        [--slots 4] [--threads 2] [--model GGUF] [--json OUT]

Prints seconds per item of each method and round, their medians and the ratio
loop / create_completions (of the medians, and its range over the rounds).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence

from llamabatch.cli.options import script_parser
from llamabatch.measure.rounds import run_rounds
from llamabatch.measure.stats import paired, per_round
from llamabatch.measure.workloads import tagged

METHODS = ("create_completions", "loop")


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, rounds=4, items=64, max_tokens=48, threads=2, model=None, json=None)
    ap.add_argument("--slots", type=int, default=4, metavar="N", help="slots (default: 4)")
    args = ap.parse_args(argv)

    from llamabatch import BatchGenerator
    from llamabatch.model import default_model_path, load_llama

    llm = load_llama(args.model or default_model_path(), n_ctx=2048, n_threads=args.threads)
    gen = BatchGenerator(llm, slots=args.slots, n_ctx_seq=512)
    kwargs = {"max_tokens": args.max_tokens, "temperature": 0}

    def run(method: str, prompts: Sequence[str]) -> int:
        if method == "create_completions":
            out = gen.create_completions(prompts, **kwargs)
        else:
            out = [llm.create_completion(p, **kwargs) for p in prompts]
        return sum(r["usage"]["completion_tokens"] for r in out)

    def items(r: int, method: str) -> list[str]:
        return tagged(f"{'AB'[METHODS.index(method)]}{r}", args.items)

    paths = {m: (lambda its, tick, m=m: run(m, its)) for m in METHODS}
    done = run_rounds(paths, items, args.rounds, warmup=lambda m: tagged(f"W{m[0]}", 2))
    times = {m: per_round(done, m) for m in METHODS}
    for r, rnd in enumerate(done):
        print(f"round {r + 1}: " + ", ".join(f"{p.path} {p.s_per_item:.4f} s" for p in rnd.passes))
    med = {m: statistics.median(t for t in v if t is not None) for m, v in times.items()}
    rounds = paired(done, "loop", "create_completions")
    ratio = med["loop"] / med["create_completions"]
    print("median s per item: " + ", ".join(f"{m} {med[m]:.4f}" for m in METHODS))
    print(f"loop / create_completions {ratio:.2f} (rounds {min(rounds):.2f}-{max(rounds):.2f})")
    print(f"stats: {gen.stats}")
    if args.json is not None:
        doc = {"args": {k: str(v) for k, v in vars(args).items()}, "seconds_per_item": times}
        doc |= {"median": med, "ratio": ratio, "ratio_per_round": rounds}
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    gen.close()
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
