"""``processor(config)``: a ``Dataset -> Dataset`` function shaped like Ray Data LLM's
processors (``ray.data.llm.build_processor``) running :class:`~llamabatch.ray.BatchCompleter`
as an actor pool under ``Dataset.map_batches``. Ray restarts an actor that dies and retries
its batch (``max_restarts=-1``, ``max_task_retries=-1`` for actor pools:
``ray/data/_internal/execution/operators/actor_pool_map_operator.py``), so every row is
completed once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model import DEFAULT_N_GPU_LAYERS
from ..params import BatchConfig
from .completer import BatchCompleter


@dataclass(frozen=True)
class ProcessorConfig:
    """What a processor runs, and on how many actors.

    Attributes:
        model_path: the GGUF file, at this path on every node that runs an actor.
        batch_config, n_ctx, n_gpu_layers, n_threads, id_column: the
            :class:`~llamabatch.ray.BatchCompleter`'s.
        batch_size: rows per ``map_batches`` call (one call completes them several
            sequences at a time, so a few times ``slots`` keeps the slots busy).
        concurrency: actors (one model each); a ``(min, max)`` tuple lets Ray scale the
            pool between the two.
        num_cpus: CPUs Ray reserves per actor (default: ``n_threads``, else 1).
        num_gpus: GPUs Ray reserves per actor (default 0: set it on a cluster with GPUs,
            e.g. 1 with ``n_gpu_layers=-1``; Ray waits for nodes that have them).
        ray_remote_args: more actor options for ``map_batches`` (``memory``,
            ``resources``, ``runtime_env``, ``max_restarts`` ...).
        completer: the callable class (a subclass of
            :class:`~llamabatch.ray.BatchCompleter` to add behaviour per actor).

    Raises:
        ValueError: a size out of range (named).
    """

    model_path: str | os.PathLike[str]
    batch_config: BatchConfig = BatchConfig()
    n_ctx: int | None = None
    n_gpu_layers: int = DEFAULT_N_GPU_LAYERS
    n_threads: int | None = None
    id_column: str | None = "id"
    batch_size: int = 16
    concurrency: int | tuple[int, int] = 1
    num_cpus: float | None = None
    num_gpus: float | None = None
    ray_remote_args: Mapping[str, Any] = field(default_factory=dict)
    completer: type = BatchCompleter

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ValueError(f"batch_size={self.batch_size!r} is not valid: an integer >= 1")
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size!r} is out of range: valid is >= 1")
        pool = self.concurrency if isinstance(self.concurrency, tuple) else (self.concurrency,)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in pool):
            raise ValueError(
                f"concurrency={self.concurrency!r} is not valid: an integer >= 1 or a "
                "(min, max) tuple of them"
            )

    def completer_kwargs(self) -> dict[str, Any]:
        """The constructor arguments of :attr:`completer`."""
        names = ("batch_config", "n_ctx", "n_gpu_layers", "n_threads", "id_column")
        return {"model_path": str(self.model_path), **{n: getattr(self, n) for n in names}}

    def map_batches_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``Dataset.map_batches`` (without the callable)."""
        num_cpus = self.num_cpus if self.num_cpus is not None else (self.n_threads or 1)
        num_gpus = self.num_gpus or 0
        from ray.data import ActorPoolStrategy

        if isinstance(self.concurrency, tuple):
            pool = ActorPoolStrategy(min_size=self.concurrency[0], max_size=self.concurrency[1])
        else:
            pool = ActorPoolStrategy(size=self.concurrency)
        kwargs: dict[str, Any] = {
            "fn_constructor_kwargs": self.completer_kwargs(),
            "batch_size": self.batch_size,
            "batch_format": "numpy",
            "compute": pool,
            "num_cpus": num_cpus,
            **dict(self.ray_remote_args),
        }
        if num_gpus:
            kwargs["num_gpus"] = num_gpus
        return kwargs


def processor(
    config: ProcessorConfig,
    preprocess: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    postprocess: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[Any], Any]:
    """A function ``Dataset -> Dataset`` that completes every row of a dataset.

    Args:
        config: the model, the generator and the actor pool.
        preprocess: a row function applied first (``Dataset.map``), e.g. to build
            ``messages`` or ``sampling_params`` from your columns.
        postprocess: a row function applied to each output row (the id column and the
            outputs, :class:`~llamabatch.ray.BatchCompleter`).

    Returns:
        ``run(ds)``: the lazy dataset of the outputs (Ray executes it when it is
        consumed: ``iter_batches``, ``write_json``, ``take_all`` ...).

    Example::

        import ray
        from llamabatch import BatchConfig, SamplingParams
        from llamabatch.ray import ProcessorConfig, processor

        labels = SamplingParams(temperature=0, choices=["bug", "billing"])
        config = ProcessorConfig("/models/SmolLM2-135M-Instruct.Q4_1.gguf", concurrency=2,
                                 batch_config=BatchConfig(max_tokens=8, sampling=labels))
        run = processor(config, preprocess=lambda row: {
            "id": row["id"], "messages": [{"role": "user", "content": row["ticket"]}]})
        run(ray.data.read_json("tickets.jsonl")).write_json("labels/")
    """

    def run(ds: Any) -> Any:
        if preprocess is not None:
            ds = ds.map(preprocess)
        ds = ds.map_batches(config.completer, **config.map_batches_kwargs())
        if postprocess is not None:
            ds = ds.map(postprocess)
        return ds

    return run
