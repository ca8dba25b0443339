"""BatchCompleter: the slot engine as a callable class for Ray Data's ``map_batches``.

Ray Data makes one instance per actor of its actor pool (``concurrency=N``): the
constructor loads the model once and opens a :class:`~llamabatch.BatchGenerator`;
each call completes one batch of rows with it, several sequences at a time. The columns
it reads and writes are those of :mod:`llamabatch.ray.columns`.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..completion import Completion
from ..errors import ModelFileError
from ..model import DEFAULT_N_GPU_LAYERS
from ..params import DEFAULT_N_CTX_SEQ, BatchConfig
from ..shapes.responses import OUTPUT_FIELDS, extra_output_names, output_record
from .columns import batch_rows, result_columns, row_item


class BatchCompleter:
    """Complete the rows of Ray Data batches on one model per actor.

    Args:
        model_path: the GGUF file; every node that runs an actor must have it at this
            path (a shared file system, or the same file copied to each node).
        batch_config: the generator's :class:`~llamabatch.BatchConfig`; its ``sampling`` is
            every row's default, a row's own fields go on top
            (:func:`llamabatch.items.resolve_item`).
        n_ctx: tokens of the ``Llama``'s own context (items completed alone must fit
            it); default ``batch_config.n_ctx_seq`` (or 4096), as ``llamabatch complete``.
        n_gpu_layers: layers offloaded to the GPU (default ``-1`` = all; no effect on a CPU
            build of llama-cpp-python).
        n_threads: CPU threads of llama.cpp (default: llama-cpp-python's).
        id_column: the column copied to the output as it is (when the batch has it).

    Raises:
        ModelFileError: the model file is not on this node (the message names the
            node) or is no GGUF file.
        ValueError: a parameter out of range (named), as for the generator.

    Call:
        ``completer(batch) -> dict[str, np.ndarray]``: ``batch`` has a ``prompt`` or a
        ``messages`` column (or both, one per row), optionally ``sampling_params`` and
        field columns; the result has ``id_column`` (when given), then ``text``,
        ``finish_reason``, ``error``, ``n_prompt_tokens``, ``n_tokens``, ``path`` and
        each optional output that some row holds (``logprobs`` ...,
        :mod:`llamabatch.shapes.responses`; and any key a subclass's :meth:`record` adds) as JSON
        text (``None`` in the rows without it: their nested shapes have no single Arrow
        type), one row per input row, in order. A row that cannot be completed (no
        prompt, a bad field, messages the chat template refuses) gets ``finish_reason``
        ``"error"`` and its ``error`` in its own row; one bad row never makes the call
        raise.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        batch_config: BatchConfig | None = None,
        n_ctx: int | None = None,
        n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
        n_threads: int | None = None,
        id_column: str | None = "id",
    ) -> None:
        from .. import BatchGenerator
        from ..model import load_llama

        config = BatchConfig() if batch_config is None else batch_config
        self.sampling = config.sampling
        self.id_column = id_column
        if not Path(model_path).is_file():
            raise ModelFileError(
                f"model file {model_path} is not on node {socket.gethostname()}: every "
                "node that runs an actor needs the model at the same path"
            )
        n_ctx = n_ctx or config.n_ctx_seq or DEFAULT_N_CTX_SEQ
        self.llm = load_llama(
            model_path, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers
        )
        self.generator = BatchGenerator.from_config(config, self.llm)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        items: list[object] = []
        refused: dict[int, str] = {}
        for k, row in enumerate(batch_rows(batch)):
            try:
                items.append(row_item(row))
            except ValueError as exc:  # a cell that is not JSON: the row's own error
                refused[k] = str(exc)
                items.append([])  # no model work; its error is set below
        done = self.generator.complete_many(items)  # a bad item: its error in its place
        records = []
        for k, completion in enumerate(done):
            record = self.record(completion)
            if k in refused:
                record.update(
                    text="", finish_reason="error", error=refused[k], n_tokens=0, path="alone"
                )
            records.append(record)
        extras = [n for n in extra_output_names() if any(n in r for r in records)]
        added = {k for r in records for k in r} - set(OUTPUT_FIELDS) - set(extra_output_names())
        extras += sorted(added)  # a subclass's own keys
        for record in records:  # nested outputs have no one Arrow type: JSON text
            for name in extras:
                if name in record:
                    record[name] = json.dumps(record[name], ensure_ascii=False)
        columns = result_columns(records, list(OUTPUT_FIELDS) + extras)
        if self.id_column is not None and self.id_column in batch:
            return {self.id_column: batch[self.id_column], **columns}
        return columns

    def record(self, completion: Completion) -> dict[str, Any]:
        """The output record of one row (:func:`llamabatch.shapes.responses.output_record`); a
        subclass may add keys, each written as a column (JSON text) of the batches in which
        some row holds it."""
        return output_record(completion)

    def __del__(self) -> None:
        generator = getattr(self, "generator", None)
        if generator is not None:
            generator.close()
        llm = getattr(self, "llm", None)
        if llm is not None and hasattr(llm, "close"):
            llm.close()
