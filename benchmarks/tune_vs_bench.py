"""tune against the benchmark: whether ``llamabatch tune``'s s/item and ratios agree with
what ``llamabatch bench --prompts`` measures for the same two paths, in one run.

One process, one loaded ``Llama`` (the default model SmolLM2-135M-Instruct, or
``--model``), PROMPTS read once as ``llamabatch tune`` reads it (``llamabatch
complete``'s formats and per-line fields; items that set no temperature get
``--temperature``, default 0.1 as in tune; items without a seed get seed 0), then
back to back on the same items (the same ``--items-seed`` draws the same disjoint
rounds of ``--items`` items in every run):

1. ``llamabatch.tune(...)``: tune's timing (each round one at a time, the floor at
   temperature > 0, then each slot count; the order reversed every other round);
2. bench's workload over the same file (``llamabatch bench --prompts``'s
   ``llamabatch.cli.bench.bench``): bench's own timing loop (each round one at a time,
   then each slot count, always in that order);
3. ``llamabatch.tune(...)`` again (skipped with ``--once``): tune before and after
   bench, so a drift of the machine during the run shows as a gap between the two tune
   runs and does not pass for a difference between tune and bench.

Per setting (one at a time, then each slot count) it prints tune's median s/item and
paired ratio (over the rounds of every tune run) beside bench's, each with its
round-to-round spread (min-max), bench minus tune, and the noise: the larger of the two
spreads (max - min). A setting *agrees within noise* when each difference (s/item; the
ratio too for a slot count) is at most its noise; with one value on each side there is
no spread to judge by (give ``--rounds 2`` or more).

    python benchmarks/tune_vs_bench.py PROMPTS [--slots 2,4] [--rounds 2] [--items N]
        [--model GGUF] [--json OUT] [--threads N] [--temperature T] [--max-tokens N]
        [--n-ctx-seq N] [--n-batch N] [--items-seed N] [--once]

Target: every setting agrees within noise. Prints tune's report, bench's table, then
the side-by-side table and one verdict line per setting; ``--json OUT`` writes both
tune reports, bench's document and the comparison (schema
``llamabatch.tune_vs_bench/1``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llamabatch.cli.tune import slot_list

SCHEMA = "llamabatch.tune_vs_bench/1"
BASELINE = "one_at_a_time"
#: The figures compared, as the table names them.
LABELS = {"s_per_item": "s/item", "ratio": "ratio"}


def spread(values: Sequence[float]) -> dict[str, Any] | None:
    """Median, min and max of ``values`` (per-round figures); ``None`` for none."""
    if not values:
        return None
    return {
        "values": list(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def tune_figures(reports: Sequence[dict[str, Any]], setting: str) -> dict[str, Any]:
    """A setting's per-round s/item and ratios over every tune run (their JSON)."""
    s_per_item: list[float] = []
    ratio: list[float] = []
    for report in reports:
        rows = [report["baseline"], *report["settings"]]
        row = next(r for r in rows if r["setting"] == setting)
        s_per_item += [s for s in row["s_per_item"] if s is not None]
        ratio += [r for r in row["ratio"] if r is not None]
    return {"s_per_item": spread(s_per_item), "ratio": spread(ratio)}


def bench_figures(doc: dict[str, Any], slots: int) -> dict[str, Any]:
    """A setting's per-round s/item and ratios in bench's JSON (B=1: one at a time)."""
    row = next(r for r in doc["workload"]["rows"] if r["b"] == slots)
    return {"s_per_item": spread(row["per_item_s"]), "ratio": spread(row["ratio"])}


def judge(tune: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """One figure (s/item or ratio) of tune and bench: the difference, the noise (the
    larger round-to-round spread) and whether the difference is within it (``None``:
    no spread to judge by)."""
    diff = bench["median"] - tune["median"]
    noise = max(tune["max"] - tune["min"], bench["max"] - bench["min"])
    within = None if noise == 0 else abs(diff) <= noise
    return {"diff": diff, "noise": noise, "within_noise": within}


def compare(
    reports: Sequence[dict[str, Any]], doc: dict[str, Any], slots: Sequence[int]
) -> list[dict[str, Any]]:
    """Per setting: tune's and bench's figures, each difference, and the verdict."""
    out = []
    for b in (1, *slots):
        setting = BASELINE if b == 1 else f"slots={b}"
        t, be = tune_figures(reports, setting), bench_figures(doc, b)
        names = ("s_per_item", "ratio") if b > 1 else ("s_per_item",)
        figures = {k: judge(t[k], be[k]) for k in names if t[k] is not None and be[k] is not None}
        results = [f["within_noise"] for f in figures.values()]
        if len(figures) < len(names):
            agree, verdict = None, "not comparable: a run of this setting failed (see above)"
        elif any(r is None for r in results):
            agree, verdict = None, "no spread to judge by (one value each: give --rounds 2 or more)"
        elif all(results):
            agree, verdict = True, "agree within noise"
        else:
            agree = False
            worst = [
                f"{LABELS[k]} {abs(f['diff']):.3f} apart, noise {f['noise']:.3f}"
                for k, f in figures.items()
                if not f["within_noise"]
            ]
            verdict = "differ beyond noise: " + "; ".join(worst)
        out.append(
            {
                "setting": setting,
                "slots": b,
                "tune": t,
                "bench": be,
                **figures,
                "agree": agree,
                "verdict": verdict,
            }
        )
    return out


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The side-by-side table, then one verdict line per setting."""
    head = ("setting", "figure", "tune", "min-max", "bench", "min-max", "bench-tune", "noise")
    table = [head]
    for row in rows:
        for figure, label in LABELS.items():
            if figure not in row:
                continue
            t, b, j = row["tune"][figure], row["bench"][figure], row[figure]
            pct = 100 * j["diff"] / t["median"] if t["median"] else float("nan")
            table.append(
                (
                    row["setting"],
                    label,
                    f"{t['median']:.3f}",
                    f"{t['min']:.3f}-{t['max']:.3f}",
                    f"{b['median']:.3f}",
                    f"{b['min']:.3f}-{b['max']:.3f}",
                    f"{j['diff']:+.3f} ({pct:+.0f} %)",
                    f"{j['noise']:.3f}",
                )
            )
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = []
    for k, r in enumerate(table):
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [f"{row['setting']}: {row['verdict']}" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prompts", metavar="PROMPTS", type=Path, help="the items, as for tune")
    ap.add_argument("--slots", type=slot_list, default=(2, 4), metavar="2,4")
    ap.add_argument("--rounds", type=int, default=2, metavar="N")
    ap.add_argument(
        "--items",
        type=int,
        default=None,
        metavar="N",
        help="items per round (default: min(8, prompts // rounds), as tune)",
    )
    ap.add_argument("--items-seed", type=int, default=0, metavar="N")
    ap.add_argument("--temperature", type=float, default=0.1, metavar="T")
    ap.add_argument("--max-tokens", type=int, default=200, metavar="N")
    ap.add_argument("--n-ctx-seq", type=int, default=4096, metavar="N")
    ap.add_argument("--n-batch", type=int, default=512, metavar="N")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU threads (default: every CPU this process may use)",
    )
    ap.add_argument("--n-gpu-layers", type=int, default=-1, metavar="N")
    ap.add_argument("--model", type=Path, default=None, metavar="GGUF")
    ap.add_argument("--once", action="store_true", help="run tune once, not again after bench")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)

    from llamabatch import SamplingParams, tune
    from llamabatch.bench.host import cpu_count
    from llamabatch.cli.bench import PROMPTS_WORKLOAD, BenchParams, bench, llama_setup
    from llamabatch.cli.common import UsageError
    from llamabatch.cli.job.items import read_items
    from llamabatch.cli.llm import loaded_llama, model_path
    from llamabatch.errors import LlamaBatchError
    from llamabatch.measure.rounds import items_per_round

    t_start = time.perf_counter()
    threads = args.threads if args.threads is not None else cpu_count()
    try:
        read = read_items(
            args.prompts,
            "auto",
            SamplingParams(temperature=args.temperature),
            warn=lambda m: print(f"tune_vs_bench.py: warning: {m}", file=sys.stderr),
        )
        per_round = items_per_round(len(read.items), args.rounds, args.items)
        path = model_path(args.model, quiet=True)
    except (UsageError, ValueError, LlamaBatchError) as exc:  # the file, sizes, the model
        print(f"tune_vs_bench.py: error: {exc}", file=sys.stderr)
        return 2
    params = BenchParams(
        slots=(1, *args.slots),
        parts=("workload",),
        n_batch=args.n_batch,
        seed=args.items_seed,
        items=per_round,
        workload_rounds=args.rounds,
        max_tokens=args.max_tokens,
        workload=PROMPTS_WORKLOAD,
        prompts=str(args.prompts),
        temperature=args.temperature,
        n_ctx_seq=args.n_ctx_seq,
    )
    order = ["tune", "bench"] + ([] if args.once else ["tune"])
    reports: list[dict[str, Any]] = []
    doc: dict[str, Any] = {}
    with loaded_llama(
        path, n_ctx=args.n_ctx_seq, n_threads=threads, n_gpu_layers=args.n_gpu_layers
    ) as llm:
        items = read.file_items(llm)
        setup = llama_setup(llm, path, params, threads=threads, n_gpu_layers=args.n_gpu_layers)
        for k, what in enumerate(order, start=1):
            print(f"\n== {k}/{len(order)}: {what}", flush=True)
            if what == "bench":
                doc = bench(setup, params, items=items, quiet=True)
                continue
            report = tune(
                llm,
                list(items.alone),
                args.slots,
                args.rounds,
                items=per_round,
                sampling=list(items.samplings),
                max_tokens=args.max_tokens,
                n_ctx_seq=args.n_ctx_seq,
                n_batch=args.n_batch,
                ids=list(items.ids),
                items_seed=args.items_seed,
                complete_args=(str(args.prompts),),
                model=path.name,
            )
            print(report.format(), flush=True)
            reports.append(report.to_json())
    rows = compare(reports, doc, args.slots)
    print(
        f"\ntune ({len(reports)} run{'s' if len(reports) > 1 else ''}, {args.rounds} rounds "
        f"each) against bench ({args.rounds} rounds), {per_round} items per round of "
        f"{len(items)}; medians over the rounds, noise = the larger round-to-round spread"
    )
    print(format_table(rows))
    if args.json is not None:
        out = {
            "schema": SCHEMA,
            "params": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "order": order,
            "items_per_round": per_round,
            "tune": reports,
            "bench": doc,
            "comparison": rows,
            "wall_s": time.perf_counter() - t_start,
        }
        out["params"]["slots"] = list(args.slots)
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", "utf-8")
        print(f"\nwritten to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
