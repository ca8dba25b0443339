"""lm-evaluation-harness ``loglikelihood`` requests: the ``llamabatch`` model against the
same requests done one by one with ``Llama(logits_all=True)``.

SmolLM2-135M-Instruct (the default model, or ``--model``), ``--items`` multiple-choice
questions per round, 4 choices each (4 requests sharing a context), after a ``--shots``-
example few-shot prefix every question shares, as a harness task builds them. Every
round has fresh questions (a round tag in each), and the methods run in alternating
order (AB, then BA). Methods:

- ``llamabatch``: :class:`llamabatch.lm_eval.LlamaBatchLM` ``.loglikelihood`` on the
  requests (a context's choices are one item, one prefill; ``--slots`` slots);
- ``logits_all``: the way a llama-cpp-python user computes it today, one request at a
  time on a ``Llama(logits_all=True)``: ``eval`` of context + continuation (the cached
  prefix kept, as ``Llama.generate`` does), the log-softmax of ``scores`` at the
  continuation's rows summed, ``is_greedy`` from their argmax.

    python benchmarks/lm_eval_loglikelihood.py [--rounds 6] [--items 16] [--shots 3]
        [--slots 4] [--threads 2] [--model GGUF] [--json OUT]

Prints seconds per request of each method and round, the medians, the ratio of the
medians and its range over the rounds (each round's pair ran minutes apart at most), and
the largest difference between the two methods' log-likelihoods.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from functools import partial

from llamabatch.cli.options import script_parser
from llamabatch.measure.one_at_a_time import logits_all_logprob
from llamabatch.measure.rounds import print_each_round, run_rounds
from llamabatch.measure.stats import paired, per_round

METHODS = ("llamabatch", "logits_all")
CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Kenya", "Nairobi"),
    ("Peru", "Lima"), ("Norway", "Oslo"), ("Chile", "Santiago"), ("Greece", "Athens"),
]  # fmt: skip


def question(tag: str, i: int) -> str:
    country, _ = CAPITALS[i % len(CAPITALS)]
    return f"Question {tag}-{i}: What is the capital of {country}?\nAnswer:"


def choices(i: int) -> list[str]:
    """Four cities: the right one and the next three of the list."""
    n = len(CAPITALS)
    return [" " + CAPITALS[(i + k) % n][1] for k in range(4)]


def requests(tag: str, n: int, shots: int) -> list[tuple[str, str]]:
    """``(context, continuation)`` pairs: ``n`` questions of 4 choices after ``shots``
    answered examples."""
    prefix = "".join(question("shot", k) + choices(k)[0] + "\n\n" for k in range(shots))
    return [(prefix + question(tag, i), c) for i in range(n) for c in choices(i)]


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, rounds=6, items=16, threads=2, model=None, json=None)
    ap.add_argument("--shots", type=int, default=3, metavar="N", help="examples (default: 3)")
    ap.add_argument("--slots", type=int, default=4, metavar="N", help="slots (default: 4)")
    args = ap.parse_args(argv)

    from lm_eval.api.instance import Instance

    from llamabatch.lm_eval import LlamaBatchLM
    from llamabatch.model import default_model_path, load_llama

    model = args.model or default_model_path()
    llm = load_llama(model, n_ctx=2048, n_threads=args.threads)
    ref = load_llama(model, n_ctx=2048, n_threads=args.threads, logits_all=True)
    lm = LlamaBatchLM(llm, slots=args.slots, n_ctx_seq=1024, quiet=True)

    def run(method: str, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        if method == "llamabatch":
            return lm.loglikelihood([Instance("loglikelihood", {}, p, 0) for p in pairs])
        return [logits_all_logprob(ref, c, x) for c, x in pairs]

    paths = {m: partial(lambda its, tick, m: run(m, its), m=m) for m in METHODS}
    done = run_rounds(
        paths,
        lambda r, m: requests(f"r{r}", args.items, args.shots),
        args.rounds,
        on_pass=print_each_round(METHODS),
    )
    worst = 0.0  # the largest |difference| of a log-likelihood between the methods
    for rnd in done:
        ours, theirs = (rnd.get(m).result for m in METHODS)  # type: ignore[union-attr]
        worst = max([worst] + [abs(a[0] - b[0]) for a, b in zip(ours, theirs)])
    times = {m: per_round(done, m) for m in METHODS}
    med = {m: statistics.median(v) for m, v in times.items()}
    ratios = paired(done, "logits_all", "llamabatch")
    ratio = med["logits_all"] / med["llamabatch"]
    print("median ms per request: " + ", ".join(f"{m} {med[m] * 1000:.1f}" for m in METHODS))
    print(f"logits_all / llamabatch: {ratio:.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    print(f"largest log-likelihood difference: {worst:.4f} nats")
    print(f"stats: {lm.generator.stats}")
    if args.json is not None:
        report_doc = {"args": {k: str(v) for k, v in vars(args).items()}}
        report_doc |= {"seconds_per_request": times, "median": med, "ratio": ratio}
        report_doc |= {"ratio_per_round": ratios, "worst": worst}
        args.json.write_text(json.dumps(report_doc, indent=2), encoding="utf-8")
    lm.close()
    ref.close()
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
