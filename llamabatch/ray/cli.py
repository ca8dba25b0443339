"""The Ray options of ``llamabatch complete``: ``--ray [ADDRESS]`` and ``--actors N``;
with ``--ray`` the job runs on a :class:`~llamabatch.ray.job.RayJob` (imported only
then, so the command works without Ray installed)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

#: ``llamabatch complete``'s Ray options: the group's title and text, then flag ->
#: ``add_argument`` keywords (:func:`llamabatch.cli.options.add_group`).
GROUP = (
    "Ray Data",
    "complete on a Ray cluster: one model per actor (the model file must be at the same "
    "path on every node), --slots sequences per actor, blocks of --page-size items "
    "(default 16) written in input order; needs pip install 'llamabatch[ray]'",
)
OPTIONS: dict[str, dict[str, Any]] = {
    "--ray": dict(
        metavar="ADDRESS",
        nargs="?",
        const="",
        help="run on Ray: without ADDRESS a local cluster (or the one RAY_ADDRESS names); "
        "'auto' the cluster of this node (ray start), HOST:6379 a head node, "
        "ray://HOST:10001 a Ray Client server (default: off: the local engine)",
    ),
    "--actors": dict(
        type=int, metavar="N", help="actors of the pool, each loading the model once (default: 1)"
    ),
    "--gpus-per-actor": dict(
        type=float,
        metavar="X",
        help="GPUs Ray reserves for each actor, e.g. 1 with --n-gpu-layers -1 on GPU nodes; "
        "Ray waits until nodes with that many are free (default: 0)",
    ),
}


def check(args: argparse.Namespace, urls: list[str]) -> None:
    """Refuse ``--actors`` without ``--ray``, ``--ray`` with a pool of servers, and a
    bad ``--actors``.

    Raises:
        llamabatch.cli.common.UsageError: what is wrong.
    """
    from ..cli.common import UsageError

    if args.ray is None:
        for flag, value in (("--actors", args.actors), ("--gpus-per-actor", args.gpus_per_actor)):
            if value is not None:
                raise UsageError(f"{flag} needs --ray")
        return
    if urls:
        raise UsageError("--ray and --server run the job in two different places; give one")
    if args.actors is not None and args.actors < 1:
        raise UsageError(f"--actors {args.actors} is out of range: valid is an integer >= 1")
    if args.gpus_per_actor is not None and not args.gpus_per_actor >= 0:
        raise UsageError(
            f"--gpus-per-actor {args.gpus_per_actor} is out of range: valid is a number >= 0"
        )


def open_job(args: argparse.Namespace, model_path: Any, config: Any) -> Any:
    """A :class:`~llamabatch.ray.job.RayJob` for the command's options and its
    :class:`~llamabatch.BatchConfig` (the model's context: ``n_ctx_seq``).

    Raises:
        llamabatch.cli.common.UsageError: Ray is missing or the cluster is unreachable.
    """
    from ..cli.common import UsageError

    try:
        from .job import RayJob, RayJobError
        from .processors import ProcessorConfig
    except ImportError as exc:
        raise UsageError(f"--ray needs Ray Data: pip install 'llamabatch[ray]' ({exc})") from None
    processor_config = ProcessorConfig(
        model_path=model_path,
        batch_config=config,
        n_gpu_layers=args.n_gpu_layers,
        n_threads=args.threads,
        concurrency=args.actors or 1,
        num_gpus=args.gpus_per_actor,
        **({} if args.page_size is None else {"batch_size": args.page_size}),
    )
    try:
        return RayJob(processor_config, args.ray)
    except RayJobError as exc:
        raise UsageError(str(exc)) from None


def item_rows(items: list[Any]) -> Iterator[dict[str, Any]]:
    """The dataset rows of the command's items (prompts, or messages for the actors'
    chat template, and each line's own fields)."""
    from .job import job_row

    for position, item in enumerate(items):
        yield job_row(position, item.prompt, item.messages, item.fields)
