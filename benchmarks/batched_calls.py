"""llama-cpp-python's calls batched, side by side with the binding's own way: seconds per item.

SmolLM2-135M-Instruct (the default model, or ``--model``), ``--items`` fresh short chat
prompts per pass (``llamabatch.measure.workloads.tagged``: each pass its own tag, so no
pass reuses another's cached prompt), greedy, ``--max-tokens`` reply tokens at most, the
two methods in alternating order each round (AB, BA, ...) after an untimed warm-up, on one
``Llama`` and one ``BatchGenerator(llm, slots=--slots)`` kept for the whole run.

``--compare create`` (the default):

- ``create_completions``: ``gen.create_completions(prompts, ...)``;
- ``loop``: ``[llm.create_completion(p, ...) for p in prompts]``.

``--compare online``: ``--clients`` threads, each completing its share of the prompts one
after the other, as a request handler does:

- ``submit``: each thread calls ``gen.submit(prompt).result()`` (the engine thread
  batches what the threads have waiting);
- ``lock``: each thread calls ``llm.create_completion(prompt, ...)`` holding one lock, so
  the threads take turns on the ``Llama`` (an application without batching).

    python benchmarks/batched_calls.py [--compare create|online] [--rounds 4] [--items 64]
        [--clients 8] [--max-tokens 48] [--slots 4] [--threads 2] [--model GGUF]
        [--json OUT]

Prints seconds per item of each method and round, their medians, the ratio of the
binding's way over ours (of the medians, and its range over the rounds), and the
generator's decode calls against its generated tokens (several sequences per decode).
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from llamabatch.cli.options import script_parser
from llamabatch.measure.rounds import run_rounds
from llamabatch.measure.stats import paired, per_round
from llamabatch.measure.workloads import tagged

#: (ours, the binding's way) of each comparison.
METHODS = {"create": ("create_completions", "loop"), "online": ("submit", "lock")}


def clients(n: int, prompts: Sequence[str], one: Callable[[str], str]) -> list[str]:
    """``n`` threads, thread k completing prompts k, k + n, ... one after the other."""

    def share(k: int) -> list[str]:
        return [one(p) for p in prompts[k::n]]

    with ThreadPoolExecutor(max_workers=n) as pool:
        return [text for part in pool.map(share, range(n)) for text in part]


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, rounds=4, items=64, max_tokens=48, threads=2, model=None, json=None)
    ap.add_argument("--compare", choices=tuple(METHODS), default="create", help="(default: create)")
    ap.add_argument("--clients", type=int, default=8, metavar="N", help="threads (default: 8)")
    ap.add_argument("--slots", type=int, default=4, metavar="N", help="slots (default: 4)")
    args = ap.parse_args(argv)

    from llamabatch import BatchGenerator, SamplingParams
    from llamabatch.model import default_model_path, load_llama

    llm = load_llama(args.model or default_model_path(), n_ctx=2048, n_threads=args.threads)
    greedy = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    gen = BatchGenerator(llm, slots=args.slots, n_ctx_seq=512, sampling=greedy)
    kwargs = {"max_tokens": args.max_tokens, "temperature": 0}
    turn = threading.Lock()

    def one_at_a_time(prompt: str) -> str:
        with turn:
            return llm.create_completion(prompt, **kwargs)["choices"][0]["text"]

    def run(method: str, prompts: Sequence[str]) -> list[str]:
        if method == "create_completions":
            return [r["choices"][0]["text"] for r in gen.create_completions(prompts, **kwargs)]
        if method == "loop":
            return [one_at_a_time(p) for p in prompts]
        if method == "submit":
            return clients(args.clients, prompts, lambda p: gen.submit(p).result().text)
        return clients(args.clients, prompts, one_at_a_time)

    methods = METHODS[args.compare]

    def items(r: int, method: str) -> list[str]:
        return tagged(f"{'AB'[methods.index(method)]}{r}", args.items)

    paths = {m: (lambda its, tick, m=m: run(m, its)) for m in methods}
    done = run_rounds(paths, items, args.rounds, warmup=lambda m: tagged(f"W{m[0]}", 2))
    times = {m: per_round(done, m) for m in methods}
    for r, rnd in enumerate(done):
        print(f"round {r + 1}: " + ", ".join(f"{p.path} {p.s_per_item:.4f} s" for p in rnd.passes))
    ours, theirs = methods
    med = {m: statistics.median(t for t in v if t is not None) for m, v in times.items()}
    rounds = paired(done, theirs, ours)
    ratio = med[theirs] / med[ours]
    stats = gen.stats
    print("median s per item: " + ", ".join(f"{m} {med[m]:.4f}" for m in methods))
    print(f"{theirs} / {ours} {ratio:.2f} (rounds {min(rounds):.2f}-{max(rounds):.2f})")
    print(f"decode calls {stats.decode_calls}, generated tokens {stats.generated_tokens}")
    if args.json is not None:
        doc = {"args": {k: str(v) for k, v in vars(args).items()}, "seconds_per_item": times}
        doc |= {"median": med, "ratio": ratio, "ratio_per_round": rounds}
        doc |= {"decode_calls": stats.decode_calls, "generated_tokens": stats.generated_tokens}
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    gen.close()
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
