"""Ray Data against the local engine on one machine: items/s and the overhead per item
of ``llamabatch complete --ray`` (not CI).

Paths, each given the same number of fresh items per job (every job's prompts differ from
the others' past the chat header, so no path reuses another's prompt cache), in an order
that alternates from round to round (:func:`llamabatch.measure.rounds.run_rounds`):

- ``local``: what ``llamabatch complete`` does without ``--ray``: load a ``Llama``, open
  a ``BatchGenerator`` (``--slots``, ``--threads``), complete the items page by page.
- ``ray1`` / ``ray2``: what ``--ray --actors 1`` / ``--actors 2`` does
  (:class:`llamabatch.ray.job.RayJob` on a local cluster started once, before the first
  round): a dataset of blocks of ``--page-size`` items, one model per actor loaded at
  the start of each job, output blocks read back in input order.

Each path runs a job of ``--items`` items and one of twice as many in every round (two
paths of the runner: ``local x1`` and ``local x2``, ...). A
job's wall time counts everything a user waits for (model loads, actor starts); the
*marginal* seconds per item, ``(wall(2N) - wall(N)) / N``, leave the fixed costs out, and
the overhead per item of a Ray path is its marginal time minus ``local``'s.

Prints one JSON object: per path, the medians over rounds of items/s of the 2N job,
the fixed seconds (``wall(N) - N * marginal``) and the marginal ms per item; per Ray
path, the overhead in ms per item against ``local``.

    nice -n 10 .venv/bin/python benchmarks/ray_overhead.py [--rounds 3] [--items 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from functools import partial
from pathlib import Path

# the local cluster on 127.0.0.1 only (see tests/conftest.py); read when ray is imported
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from llamabatch import BatchConfig, BatchGenerator, SamplingParams
from llamabatch.cli.options import script_parser
from llamabatch.measure.rounds import run_rounds
from llamabatch.measure.stats import per_round, seconds
from llamabatch.measure.workloads import tagged
from llamabatch.model import default_model_path, load_llama

GREEDY = SamplingParams(temperature=0)


def run_local(args: argparse.Namespace, items: list[str]) -> list[str]:
    llm = load_llama(args.model, n_ctx=args.n_ctx_seq, n_threads=args.threads)
    try:
        with BatchGenerator(
            llm,
            slots=args.slots,
            n_ctx_seq=args.n_ctx_seq,
            max_tokens=args.max_tokens,
            sampling=GREEDY,
        ) as gen:
            return [c.text for group in gen.iter_groups(items) for c in group]
    finally:
        llm.close()


def run_ray(args: argparse.Namespace, items: list[str], actors: int) -> list[str]:
    from llamabatch.ray import ProcessorConfig, RayJob
    from llamabatch.ray.job import job_row

    config = ProcessorConfig(
        model_path=str(args.model),
        batch_config=BatchConfig(
            slots=args.slots,
            n_ctx_seq=args.n_ctx_seq,
            max_tokens=args.max_tokens,
            sampling=GREEDY,
        ),
        n_threads=args.threads,
        batch_size=args.page_size,
        concurrency=actors,
    )
    rows = [job_row(k, p, None, {}) for k, p in enumerate(items)]
    with RayJob(config) as job:  # this process is connected already: the cluster stays
        done = [c for group in job.iter_groups(rows) for c in group]
    if any(not c.ok for c in done):
        raise RuntimeError(f"failed items: {[c.error for c in done if not c.ok][:3]}")
    return [c.text for c in done]


def whole(job):
    """``job`` as a path of ``run_rounds`` that refuses to lose an item."""

    def path(items, progress):
        out = job(list(items))
        if len(out) != len(items):
            raise RuntimeError(f"{len(out)} replies to {len(items)} items")
        return out

    return path


def main() -> None:
    ap = script_parser(
        __doc__, rounds=3, items=32, max_tokens=16, threads=1, n_ctx_seq=512, model=None
    )
    ap.add_argument("--slots", type=int, default=4, help="slots of each engine (default: 4)")
    ap.add_argument("--page-size", type=int, default=16, help="items per Ray block")
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2], help="Ray paths")
    args = ap.parse_args()
    args.model = args.model or Path(os.environ.get("LLAMABATCH_TEST_GGUF") or default_model_path())

    import ray

    ray.init(
        num_cpus=max(os.cpu_count() or 1, max(args.actors) * args.threads),
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    jobs = {"local": lambda items: run_local(args, items)}
    for n in args.actors:
        jobs[f"ray{n}"] = partial(lambda items, n: run_ray(args, items, n), n=n)
    paths = {f"{name} x{t}": whole(job) for name, job in jobs.items() for t in (1, 2)}
    try:
        done = run_rounds(
            paths,
            lambda r, path: tagged(f"{r}-{path}", int(path[-1]) * args.items),
            args.rounds,
        )
    finally:
        ray.shutdown()
    names = list(jobs)
    walls = {n: {t: per_round(done, f"{n} x{t}", seconds) for t in (1, 2)} for n in names}
    report: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    marginal: dict[str, float] = {}
    for name in names:
        small, big = statistics.median(walls[name][1]), statistics.median(walls[name][2])
        marginal[name] = (big - small) / args.items
        report[name] = {
            "items_per_s": round(2 * args.items / big, 3),
            "fixed_s": round(small - args.items * marginal[name], 2),
            "marginal_ms_per_item": round(1000 * marginal[name], 1),
            "walls_s": {
                str(k * args.items): [round(w, 2) for w in v] for k, v in walls[name].items()
            },
        }
    report["overhead_ms_per_item"] = {
        name: round(1000 * (marginal[name] - marginal["local"]), 1)
        for name in names
        if name != "local"
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
