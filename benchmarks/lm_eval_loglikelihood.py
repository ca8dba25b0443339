"""lm-evaluation-harness ``loglikelihood`` requests: the ``llamabatch`` model against the
same requests done one by one with ``Llama(logits_all=True)``.

SmolLM2-135M-Instruct (the default model, or ``--model``), ``--questions`` multiple-choice
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

    python benchmarks/lm_eval_loglikelihood.py [--rounds 6] [--questions 16] [--shots 3]
        [--slots 4] [--threads 2] [--model GGUF] [--json OUT]

Prints seconds per request of each method and round, the medians, the ratio of the
medians and its range over the rounds (each round's pair ran minutes apart at most), and
the largest difference between the two methods' log-likelihoods.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

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


def logits_all_way(ref, context: str, continuation: str) -> tuple[float, bool]:
    """``(log P(continuation | context), is_greedy)`` on a ``Llama(logits_all=True)``: the
    continuation's tokens are what follows the context's in ``tokenize(context +
    continuation)``; the cache keeps what it shares with them."""
    import numpy as np

    p = ref.tokenize(context.encode(), add_bos=True, special=True)
    full = ref.tokenize((context + continuation).encode(), add_bos=True, special=True)
    k = 0
    while k < min(len(p), len(full)) and p[k] == full[k]:
        k += 1
    cached = ref.input_ids[: ref.n_tokens].tolist()
    keep = 0
    while keep < min(len(cached), k - 1) and cached[keep] == full[keep]:
        keep += 1
    ref.n_tokens = keep
    ref.eval(full[keep:])
    total, greedy = 0.0, True
    for j in range(k, len(full)):
        row = np.asarray(ref.scores[j - 1], dtype=np.float64)
        top = row.max()
        total += row[full[j]] - top - math.log(float(np.exp(row - top).sum()))
        greedy = greedy and int(row.argmax()) == full[j]
    return total, greedy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    import llama_cpp
    from lm_eval.api.instance import Instance

    from llamabatch.lm_eval import LlamaBatchLM
    from llamabatch.model import default_model_path

    model = str(args.model or default_model_path())
    kw = {"n_ctx": 2048, "n_threads": args.threads, "n_threads_batch": args.threads}
    llm = llama_cpp.Llama(model_path=model, verbose=False, **kw)
    ref = llama_cpp.Llama(model_path=model, verbose=False, logits_all=True, **kw)
    lm = LlamaBatchLM(llm, slots=args.slots, n_ctx_seq=1024, quiet=True)

    def run(method: str, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]]:
        if method == "llamabatch":
            return lm.loglikelihood([Instance("loglikelihood", {}, p, 0) for p in pairs])
        return [logits_all_way(ref, c, x) for c, x in pairs]

    times: dict[str, list[float]] = {m: [] for m in METHODS}
    worst = 0.0  # the largest |difference| of a log-likelihood between the methods
    for r in range(args.rounds):
        order = METHODS if r % 2 == 0 else tuple(reversed(METHODS))
        pairs = requests(f"r{r}", args.questions, args.shots)
        got = {}
        for method in order:
            t0 = time.perf_counter()
            got[method] = run(method, pairs)
            times[method].append((time.perf_counter() - t0) / len(pairs))
        worst = max([worst] + [abs(a[0] - b[0]) for a, b in zip(*got.values())])
        print(
            f"round {r + 1}: " + ", ".join(f"{m} {times[m][-1] * 1000:.1f} ms" for m in METHODS),
            flush=True,
        )
    med = {m: statistics.median(v) for m, v in times.items()}
    ratio = med["logits_all"] / med["llamabatch"]
    per_round = [b / a for a, b in zip(times["llamabatch"], times["logits_all"])]
    print("median ms per request: " + ", ".join(f"{m} {med[m] * 1000:.1f}" for m in METHODS))
    print(
        f"logits_all / llamabatch: {ratio:.2f} (rounds {min(per_round):.2f}-{max(per_round):.2f})"
    )
    print(f"largest log-likelihood difference: {worst:.4f} nats")
    print(f"stats: {lm.generator.stats}")
    if args.json is not None:
        report = {"args": {k: str(v) for k, v in vars(args).items()}, "seconds_per_request": times}
        report |= {"median": med, "ratio": ratio, "ratio_per_round": per_round, "worst": worst}
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    lm.close()
    ref.close()
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
