"""``llamabatch complete --ray``: the command's job executed by Ray Data.

:class:`RayJob` has the surface the command writes pages from (``iter_groups``,
``stats``-like note, ``close``): the rows go to a dataset of blocks of ``batch_size``
rows, :func:`~llamabatch.ray.processor` completes them on the actor pool, and the
output blocks are read back in input order (``DataContext.execution_options.
preserve_order``), each one as a group of completions that the command writes, flushes
and fsyncs before it reads the next. So a driver killed at any moment loses at most the
blocks that were in flight, and ``--resume`` completes the rest. Ray's own progress bars
are turned off (the command shows one).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .._util.closing import Closing
from ..completion import Completion
from ..errors import RayJobError
from ..remote.completion import RemoteCompletion
from ..shapes.responses import extra_output_names, from_json
from .columns import SAMPLING_PARAMS_COLUMN, batch_rows
from .completer import BatchCompleter
from .processors import ProcessorConfig, processor

#: The column of a row's position in the job (the completion's ``index``).
ROW_COLUMN = "row"
#: The column of a reply's token ids (JSON text), which the job's completer adds: the
#: driver writes OpenAI logprobs from them (the chosen token of each step).
TOKEN_IDS_COLUMN = "token_ids"


class JobCompleter(BatchCompleter):
    """The job's completer: :class:`~llamabatch.ray.BatchCompleter`'s records, each with
    its reply's token ids (:data:`TOKEN_IDS_COLUMN`)."""

    def record(self, completion: Completion) -> dict[str, Any]:
        return {**super().record(completion), TOKEN_IDS_COLUMN: list(completion.token_ids)}


def job_row(position: int, prompt: str | None, messages: Any, fields: Mapping[str, Any]) -> dict:
    """The dataset row of one item: its position, its prompt or its messages (JSON
    text), and its own line fields (``sampling_params``, JSON text: one Arrow type for
    every row, whatever fields each line sets)."""
    return {
        ROW_COLUMN: position,
        "prompt": prompt if messages is None else None,
        "messages": None if messages is None else json.dumps(messages, ensure_ascii=False),
        SAMPLING_PARAMS_COLUMN: json.dumps(dict(fields), ensure_ascii=False),
    }


class RayJob(Closing):
    """A job on a Ray cluster, run page by page in input order.

    Args:
        config: the model, generator and actor pool (its ``id_column`` is replaced by
            :data:`ROW_COLUMN`; the default completer by :class:`JobCompleter`, which
            sends each reply's token ids back too).
        address: the cluster: ``None`` or ``""`` starts a local one (or joins the one
            ``RAY_ADDRESS`` names), ``"auto"`` the one started on this node with ``ray
            start``, ``"HOST:6379"`` a head node, ``"ray://HOST:10001"`` a Ray Client
            server. When this process is already connected (``ray.init`` was called),
            that connection is used and left open.

    Raises:
        RayJobError: Ray is not installed, or cannot connect to ``address``.
    """

    def __init__(self, config: ProcessorConfig, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise RayJobError(
                f"--ray needs Ray Data: pip install 'llamabatch[ray]' ({exc})"
            ) from None
        completer = JobCompleter if config.completer is BatchCompleter else config.completer
        self.config = dataclasses.replace(config, id_column=ROW_COLUMN, completer=completer)
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                ray.init(
                    address=address or None,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    include_dashboard=False,
                )
            except Exception as exc:  # ConnectionError, ValueError, RuntimeError ...
                where = address or "a new local cluster"
                raise RayJobError(f"cannot start Ray on {where}: {exc}") from None
        self.batches = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Disconnect from the cluster (and stop it, when this job started it)."""
        if self._closed:
            return
        self._closed = True
        if self._owns:
            import ray

            ray.shutdown()

    def note(self) -> str:
        """The end of the summary line: actors and blocks."""
        return (
            f"ray: {self.config.concurrency} actors, {self.batches} blocks of at most "
            f"{self.config.batch_size} items"
        )

    def iter_groups(self, rows: Iterable[Mapping[str, Any]]) -> Iterator[list[Completion]]:
        """Complete ``rows`` (:func:`job_row` rows), yielding one list of completions
        per output block, in input order.

        Raises:
            RayJobError: the job failed on the cluster (the message says why).
        """
        rows = list(rows)
        if not rows:
            return
        import ray

        with _ordered_quiet_context():
            blocks = max(1, math.ceil(len(rows) / self.config.batch_size))
            ds = ray.data.from_items(rows, override_num_blocks=blocks)
            out = processor(self.config)(ds)
            batches = iter(out.iter_batches(batch_size=None, batch_format="numpy"))
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except Exception as exc:  # RayTaskError, ActorDiedError ... after retries
                    raise RayJobError(f"the Ray job failed: {_short(exc)}") from None
                self.batches += 1
                yield [_completion(row) for row in batch_rows(batch)]


@contextmanager
def _ordered_quiet_context() -> Iterator[None]:
    """Ray Data's context for the job: blocks in input order, no progress bars of its
    own; put back as it was afterwards."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    saved = (
        ctx.execution_options.preserve_order,
        ctx.enable_progress_bars,
        ctx.print_on_execution_start,
    )
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    loggers = {  # its notes that progress bars are off, and that a dataset started / ended
        logging.getLogger("ray.data._internal.progress"): logging.ERROR,
        logging.getLogger("ray.data._internal.execution.streaming_executor"): logging.WARNING,
    }
    levels = {logger: logger.level for logger in loggers}
    for logger, level in loggers.items():
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)
        (
            ctx.execution_options.preserve_order,
            ctx.enable_progress_bars,
            ctx.print_on_execution_start,
        ) = saved


def _completion(row: Mapping[str, Any]) -> RemoteCompletion:
    extras = {
        n: from_json(n, json.loads(row[n])) for n in extra_output_names() if row.get(n) is not None
    }
    token_ids = row.get(TOKEN_IDS_COLUMN)
    return RemoteCompletion(
        index=int(row[ROW_COLUMN]),
        text=row["text"] or "",
        token_ids=tuple(json.loads(token_ids)) if token_ids is not None else (),
        finish_reason=row["finish_reason"],
        error=row["error"],
        n_prompt_tokens=int(row["n_prompt_tokens"] or 0),
        path=row["path"],
        n_completion_tokens=int(row["n_tokens"] or 0),
        **extras,
    )


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    last = next((line for line in reversed(text) if line.strip()), type(exc).__name__)
    return f"{type(exc).__name__}: {last.strip()}"
