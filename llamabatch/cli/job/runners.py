"""Where a ``llamabatch complete`` job runs (:class:`JobRunner`): the local engine, a pool of
servers (``--server``) or Ray Data (``--ray``); their options and construction. The pool's
and Ray's modules are imported only when asked (the command works without httpx or Ray)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from ...completion import Completion
from ...errors import RayJobError
from ...generator import BatchGenerator
from ...params import BatchConfig
from .. import options
from ..common import usage_error
from ..errors import UsageError
from .input import LineItem

if TYPE_CHECKING:
    from ...ray.job import RayJob
    from ...remote.generator import RemoteGenerator

_Item = TypeVar("_Item", contravariant=True)

#: Environment variable whose value is sent as ``Authorization: Bearer`` to every server.
API_KEY_ENV = "LLAMABATCH_API_KEY"


class JobRunner(Protocol[_Item]):
    """What a job runs on: items in, pages of their completions out in input order (each
    page written before the next is asked for); ``close()`` frees it, callable many times.
    :class:`~llamabatch.BatchGenerator` and :class:`~llamabatch.remote.RemoteGenerator`
    take :func:`.input.job_items`, :class:`~llamabatch.ray.RayJob` :func:`ray_rows`."""

    def iter_groups(self, items: Iterable[_Item], /) -> Iterator[Sequence[Completion]]: ...

    def close(self) -> None: ...


def open_local(llm: Any, config: BatchConfig, args: argparse.Namespace) -> BatchGenerator:
    """A :class:`~llamabatch.BatchGenerator` of ``config`` on ``llm``; UsageError for a
    value llama.cpp refuses (e.g. more slots than it allows), named by its flag."""
    try:
        return BatchGenerator.from_config(config, llm)
    except ValueError as exc:
        raise usage_error(exc, args) from None


_POOL_GROUP = (
    "pool of servers",
    "complete on OpenAI-compatible servers (llama-server, llama-cpp-python's server, vLLM) "
    "instead of a local model: prompts go to /v1/completions, messages to "
    "/v1/chat/completions; --model, --slots, --n-ctx-seq, --n-batch, --threads and "
    f"--n-gpu-layers are then unused; the environment variable {API_KEY_ENV}, when set, is "
    "sent as the bearer token (vLLM --api-key)",
)
_POOL_OPTIONS: dict[str, dict[str, Any]] = {
    "--server": dict(
        metavar="URL",
        action="append",
        default=[],
        help="base URL of a server, e.g. http://10.0.0.2:8080; repeatable (default: none: "
        "use the local model)",
    ),
    "--servers-file": dict(
        metavar="FILE",
        type=Path,
        help="file of server URLs, one per line; blank lines and lines starting with # are "
        "skipped (default: none)",
    ),
    "--concurrency": dict(
        type=int,
        metavar="N",
        help="requests in flight per server that does not report its slots (llama-server's "
        "/props total_slots wins) (default: 1)",
    ),
}


def server_urls(args: argparse.Namespace) -> list[str]:
    """The URLs of ``--server`` and ``--servers-file`` (empty: no pool); UsageError for
    a file that cannot be read or holds none, or ``--concurrency`` without a server."""
    urls = list(getattr(args, "server", None) or [])
    path = getattr(args, "servers_file", None)
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--servers-file {path}: cannot be read: {exc}") from None
        lines = [line.strip() for line in text.splitlines()]
        urls += [line for line in lines if line and not line.startswith("#")]
        if not urls:
            raise UsageError(f"--servers-file {path}: holds no server URL")
    if not urls and getattr(args, "concurrency", None) is not None:
        raise UsageError("--concurrency needs --server or --servers-file")
    return urls


def open_pool(args: argparse.Namespace, urls: list[str], config: BatchConfig) -> RemoteGenerator:
    """A :class:`~llamabatch.remote.RemoteGenerator` on ``urls`` with ``config``'s
    ``max_tokens`` and ``sampling`` and ``--page-size``; UsageError without httpx, or for
    a bad URL or option (named)."""
    try:
        from ...remote.generator import RemoteGenerator
    except ModuleNotFoundError as exc:
        raise UsageError(f"--server needs {exc.name}: pip install 'llamabatch[remote]'") from None
    try:
        return RemoteGenerator(
            urls,
            concurrency=1 if args.concurrency is None else args.concurrency,
            max_tokens=config.max_tokens,
            sampling=config.sampling,
            page_size=args.page_size,
            api_key=os.environ.get(API_KEY_ENV) or None,
        )
    except ValueError as exc:
        raise usage_error(exc, args) from None


def pool_note(gen: RemoteGenerator) -> str:
    """The end of the summary line: servers, slots, retries."""
    stats = gen.stats
    servers = gen.servers
    down = [s.url for s in servers if not s.is_up]
    slots = sum(s.slots for s in servers)
    note = (
        f"pool of {len(servers)} servers ({slots} slots), {stats.requests} requests, "
        f"{stats.retries} retries"
    )
    return note + (f"; down at the end: {', '.join(down)}" if down else "")


_RAY_GROUP = (
    "Ray Data",
    "complete on a Ray cluster: one model per actor (the model file must be at the same "
    "path on every node), --slots sequences per actor, blocks of --page-size items "
    "(default 16) written in input order; needs pip install 'llamabatch[ray]'",
)
_RAY_OPTIONS: dict[str, dict[str, Any]] = {
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


def check_ray(args: argparse.Namespace, urls: list[str]) -> None:
    """Raise UsageError for ``--actors`` or ``--gpus-per-actor`` without ``--ray`` or out
    of range, and for ``--ray`` with a pool of servers."""
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


def open_ray_job(args: argparse.Namespace, model_path: Path, config: BatchConfig) -> RayJob:
    """A :class:`~llamabatch.ray.RayJob` for the options and ``config`` (the model's
    context: ``n_ctx_seq``); UsageError without Ray or when the cluster is unreachable."""
    try:
        from ...ray.job import RayJob
        from ...ray.processors import ProcessorConfig
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


def ray_rows(items: list[LineItem]) -> Iterator[dict[str, Any]]:
    """The dataset rows of the job's items (prompts, or messages for the actors' chat
    template, and each line's own fields)."""
    from ...ray.job import job_row

    for position, item in enumerate(items):
        prompt = cast("str | None", item.prompt)  # text: the actors render the chats
        yield job_row(position, prompt, item.messages, item.fields)


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the option groups of the pool of servers and of Ray to ``parser``."""
    for group, flags in ((_POOL_GROUP, _POOL_OPTIONS), (_RAY_GROUP, _RAY_OPTIONS)):
        options.add_group(parser, group, flags)
