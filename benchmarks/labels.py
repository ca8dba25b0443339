"""Label scores and n replies per prompt: what they cost per item, side by side.

SmolLM2-135M-Instruct (the default model, or ``--model``), 4 labels, ``--slots`` slots,
``--items`` fresh ticket prompts per job (the example tickets with a job tag and item
number added, so no job replays a cached prompt), the methods run in alternating
order each round (ABCDEFGH, then HGFEDCBA, ...). ``--fresh-at item`` (the default) puts the
tag in front of the ticket's text, after the instruction every item shares, as a
tagger's items vary after a fixed instruction; ``--fresh-at front`` puts it in front of
the user's message, so only the system prompt is shared. Methods:

- ``scored``: ``SamplingParams(choices=LABELS, score_choices=True)`` (every label's
  log-probability, the label with and without a leading space);
- ``greedy``: one constrained greedy label, ``SamplingParams(temperature=0, choices=LABELS)``;
- ``llama-cpp-python``: the way without llamabatch, a ``Llama(logits_all=True)`` and one
  ``eval(prompt + label)`` per label (and per leading-space form, as ``scored`` counts
  both), the log-softmax of ``scores`` at the label's rows summed; the ``Llama`` keeps the
  prompt prefix between calls (``create_completion(echo=True, logprobs=1)`` does the same
  work plus a top-k of every prompt row in Python, much slower);
- ``n=5 shared``: ``SamplingParams(n=5, temperature=0.8, seed=...)``, one prefill shared;
- ``n=5 separate``: the same five replies as five items (seeds seed + j);
- ``floor``: ``SamplingParams(temperature=0, max_tokens=1)``, the prompt's prefill and one
  token: the least any method of the slot engine costs per item. ``llama-cpp-python /
  floor`` bounds what scoring can gain over the llama-cpp-python way here, were its label
  tokens free (on a CPU, prefill costs the same per token batched or not);
- ``floor + label``: the same with the prompt given as token ids and the tokens of the
  longest label's likely form (``" feature_request"``) but its last one appended: what
  every exact scoring must decode per item at least, with one row of logits instead of
  that form's three;
- ``longest label``: ``SamplingParams(choices=[" feature_request"], score_choices=True)``,
  that form scored alone: its tokens and its three rows, the least any exact scoring of
  these labels computes (the one-token labels ride on the prompt's last row). ``llama-
  cpp-python / longest label`` bounds what scoring can gain here.

    python benchmarks/labels.py [--rounds 6] [--items 16] [--slots 4] [--threads 2]
        [--fresh-at item|front] [--model GGUF] [--json OUT]

Targets: ``scored`` at most 1.5x ``greedy`` per item, and at least 2x faster than
``llama-cpp-python``. Prints seconds per item for each method and round, their medians
and the ratios (of the medians, and the range of the same ratio within each round, whose
methods ran minutes apart at most).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from llamabatch import SamplingParams
from llamabatch.cli.options import script_parser
from llamabatch.measure.records import WorkItem
from llamabatch.measure.rounds import Pass, order, run_rounds
from llamabatch.measure.stats import paired, per_round

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tag_prompts.jsonl"
LABELS = ["billing", "bug", "account", "feature_request"]
METHODS = (
    "scored",
    "greedy",
    "llama-cpp-python",
    "n=5 shared",
    "n=5 separate",
    "floor",
    "floor + label",
    "longest label",
)
#: (numerator, denominator) of each ratio printed.
#: Each method's sampling (its seed set per round: n=5's draws differ from round to round).
SAMPLINGS = {
    "scored": SamplingParams(choices=LABELS, score_choices=True),
    "greedy": SamplingParams(temperature=0.0, choices=LABELS),
    "llama-cpp-python": SamplingParams(),  # not used: its own way
    "n=5 shared": SamplingParams(n=5, temperature=0.8),
    "n=5 separate": SamplingParams(temperature=0.8),
    "floor": SamplingParams(temperature=0.0, max_tokens=1),
    "floor + label": SamplingParams(temperature=0.0, max_tokens=1),
    "longest label": SamplingParams(choices=[" " + max(LABELS, key=len)], score_choices=True),
}
RATIOS = (
    ("scored", "greedy"),
    ("llama-cpp-python", "scored"),
    ("n=5 separate", "n=5 shared"),
    ("llama-cpp-python", "floor"),
    ("llama-cpp-python", "floor + label"),
    ("llama-cpp-python", "longest label"),
)


def tickets() -> list[str]:
    """The example prompts whose labels are :data:`LABELS`."""
    rows = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    return [r["prompt"] for r in rows if r["choices"] == LABELS]


def fresh_prompts(tag: str, n: int, at: str = "item") -> list[str]:
    """``n`` prompts no earlier job saw: ``Ticket <tag>-<i>.`` in front of the ticket's
    text (``at="item"``, after the shared instruction) or of the user's message
    (``at="front"``). The caller's tags start with a letter of their own per job (see
    :func:`job_tag`), so that a job's prompts share with the previous job's, which the
    slots still hold, the same tokens for every method: up to ``Ticket`` and no digit."""
    base = tickets()
    marker = "?\n\n" if at == "item" else "<|im_start|>user\n"
    out = []
    for i in range(n):
        p = base[i % len(base)]
        cut = p.index(marker) + len(marker)
        out.append(f"{p[:cut]}Ticket {tag}-{i}. {p[cut:]}")
    return out


def job_tag(round_no: int, position: int) -> str:
    """The tag of the ``position``-th job of round ``round_no``: a letter per position
    (each job's letter differs from the one before it, also across rounds) and the round."""
    return f"{chr(ord('A') + position)}{round_no}"


def with_label_tokens(llm, prompt: str, written: str) -> list[int]:
    """``prompt``'s tokens (with BOS) and those of ``written`` after it but the last: the
    tokens a scoring of ``written`` must decode (the last one is only a row's target)."""
    full = llm.tokenize((prompt + written).encode(), add_bos=True, special=True)
    return full[:-1]


def llama_cpp_python_way(ref, prompt: str) -> dict[str, float]:
    """Every label's log-probability the way a llama-cpp-python user computes it: one
    ``Llama.eval(prompt + label)`` per label and form on a ``Llama(logits_all=True)``,
    keeping the prefix its cache already holds (as ``Llama.generate`` does: ``n_tokens``
    cut to the common prefix), then the log-softmax of ``scores`` at the label's rows."""
    import math

    import numpy as np

    p = ref.tokenize(prompt.encode(), add_bos=True, special=True)
    scores = {}
    for label in LABELS:
        parts = []
        for written in (label, " " + label):
            full = ref.tokenize((prompt + written).encode(), add_bos=True, special=True)
            k = 0
            while k < min(len(p), len(full)) and p[k] == full[k]:
                k += 1
            cached = ref.input_ids[: ref.n_tokens].tolist()
            keep = 0
            while keep < min(len(cached), k - 1) and cached[keep] == full[keep]:
                keep += 1
            ref.n_tokens = keep
            ref.eval(full[keep:])
            total = 0.0
            for j in range(k, len(full)):
                row = np.asarray(ref.scores[j - 1], dtype=np.float64)
                top = row.max()
                total += row[full[j]] - top - math.log(float(np.exp(row - top).sum()))
            parts.append(total)
        top = max(parts)
        scores[label] = top + math.log(sum(math.exp(v - top) for v in parts))
    return scores


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, rounds=6, items=16, threads=2, model=None, json=None)
    ap.add_argument("--slots", type=int, default=4, metavar="N", help="slots (default: 4)")
    ap.add_argument(
        "--fresh-at",
        choices=("item", "front"),
        default="item",
        help="where the job tag and item number go: before the ticket (after the shared "
        "instruction) or before the user's message (default: item)",
    )
    args = ap.parse_args(argv)

    from llamabatch import BatchGenerator
    from llamabatch.model import default_model_path, load_llama

    model = args.model or default_model_path()
    llm = load_llama(model, n_ctx=2048, n_threads=args.threads)
    ref = load_llama(model, n_ctx=2048, n_threads=args.threads, logits_all=True)
    gen = BatchGenerator(llm, slots=args.slots, n_ctx_seq=512, max_tokens=16)
    longest = " " + max(LABELS, key=len)

    def run(method: str, items: Sequence[WorkItem]) -> None:
        prompts = [it.prompt for it in items]
        if method == "llama-cpp-python":
            for p in prompts:
                llama_cpp_python_way(ref, str(p))
        elif method == "floor + label":
            ids = [with_label_tokens(llm, str(p), longest) for p in prompts]
            gen.complete_many(ids, items[0].sampling)
        elif method == "n=5 separate":  # the same five draws as n=5 shared, as items
            many = [p for p in prompts for _ in range(5)]
            seeds = [
                replace(it.sampling, seed=it.sampling.seed + j) for it in items for j in range(5)
            ]
            gen.complete_many(many, seeds)
        else:
            gen.complete_many(prompts, [it.sampling for it in items])

    def items(r: int, method: str) -> list[WorkItem]:
        tag = job_tag(r, order(METHODS, r).index(method))
        sampling = replace(SAMPLINGS[method], seed=1000 * r)
        return [
            WorkItem(i, p, sampling)
            for i, p in enumerate(fresh_prompts(tag, args.items, args.fresh_at))
        ]

    def report(r: int, p: Pass) -> None:
        heard[p.path] = p.s_per_item
        if len(heard) == len(METHODS):
            print(
                f"round {r + 1}: "
                + ", ".join(f"{m} {heard.pop(m) * 1000:.1f} ms" for m in METHODS),
                flush=True,
            )

    heard: dict[str, float] = {}
    paths = {m: partial(lambda its, tick, m: run(m, its), m=m) for m in METHODS}
    done = run_rounds(paths, items, args.rounds, on_pass=report)
    times = {m: per_round(done, m) for m in METHODS}
    med = {m: statistics.median(v) for m, v in times.items()}
    ratios = {f"{a} / {b}": med[a] / med[b] for a, b in RATIOS}
    per_ratio = {f"{a} / {b}": paired(done, a, b) for a, b in RATIOS}
    print("median ms per item: " + ", ".join(f"{m} {med[m] * 1000:.1f}" for m in METHODS))
    print(
        "ratios: "
        + ", ".join(
            f"{k} {v:.2f} (rounds {min(per_ratio[k]):.2f}-{max(per_ratio[k]):.2f})"
            for k, v in ratios.items()
        )
    )
    print(f"stats: {gen.stats}")
    if args.json is not None:
        doc = {"args": {k: str(v) for k, v in vars(args).items()}, "seconds_per_item": times}
        doc |= {"median": med, "ratios": ratios, "ratios_per_round": per_ratio}
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    gen.close()
    ref.close()
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
