"""The pool options of ``llamabatch complete``: ``--server``, ``--servers-file``,
``--concurrency``; with a server given, the job runs on a :class:`RemoteGenerator`
instead of loading a model."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

#: Environment variable whose value is sent as ``Authorization: Bearer`` to every server.
API_KEY_ENV = "LLAMABATCH_API_KEY"


#: ``llamabatch complete``'s pool options: the group's title and text, then flag ->
#: ``add_argument`` keywords (:func:`llamabatch.cli.options.add_group`).
GROUP = (
    "pool of servers",
    "complete on OpenAI-compatible servers (llama-server, llama-cpp-python's server, vLLM) "
    "instead of a local model: prompts go to /v1/completions, messages to "
    "/v1/chat/completions; --model, --slots, --n-ctx-seq, --n-batch, --threads and "
    f"--n-gpu-layers are then unused; the environment variable {API_KEY_ENV}, when set, is "
    "sent as the bearer token (vLLM --api-key)",
)
OPTIONS: dict[str, dict[str, Any]] = {
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
    """The URLs of ``--server`` and ``--servers-file`` (empty: no pool).

    Raises:
        llamabatch.cli.common.UsageError: the file cannot be read.
    """
    from ..cli.common import UsageError

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


def open_generator(args: argparse.Namespace, urls: list[str], config: Any) -> Any:
    """A :class:`RemoteGenerator` on ``urls`` with the run's ``max_tokens`` and ``sampling``
    (a :class:`~llamabatch.BatchConfig`) and ``--page-size``.

    Raises:
        llamabatch.cli.common.UsageError: a bad URL or option (named).
    """
    from ..cli.common import UsageError, usage_error

    try:
        from .generator import RemoteGenerator
    except ModuleNotFoundError as exc:
        raise UsageError(f"--server needs {exc.name}: pip install 'llamabatch[remote]'") from None
    try:
        concurrency = 1 if args.concurrency is None else args.concurrency
        return RemoteGenerator(
            urls,
            concurrency=concurrency,
            max_tokens=config.max_tokens,
            sampling=config.sampling,
            page_size=args.page_size,
            api_key=os.environ.get(API_KEY_ENV) or None,
        )
    except ValueError as exc:
        raise usage_error(exc, args) from None


def pool_note(gen: Any) -> str:
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
