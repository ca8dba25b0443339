"""The subcommands' model: its path (given or the default), and a ``Llama`` loaded for
the length of a ``with`` block and closed after it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def model_path(
    model: Path | None, *, quiet: bool, note: Callable[[str], None] | None = None
) -> Path:
    """``model`` checked (``ModelFileError`` when it is no GGUF file), or the default
    model's path, fetched once (``ModelFetchError`` when that fails); ``note`` hears
    which default was taken."""
    from ..model import check_model_file, default_model_path

    if model is not None:
        return check_model_file(model)
    path = default_model_path(quiet=quiet)
    if note is not None:
        note(f"no --model given, using the default model SmolLM2-135M-Instruct Q4_1: {path}")
    return path


@contextlib.contextmanager
def loaded_llama(
    path: Path,
    *,
    n_ctx: int,
    n_threads: int | None,
    n_gpu_layers: int,
    n_ctx_flag: str | None = None,
) -> Iterator[Any]:
    """A ``llama_cpp.Llama`` of ``path`` (see :func:`llamabatch.model.load_llama`),
    closed when the block ends, however it ends.

    Raises:
        UsageError: with ``n_ctx_flag`` (the option that set ``n_ctx``), a context that
            llama.cpp could not create, named by that option with its KV cache's size.
    """
    from ..errors import ContextUnavailable
    from ..model import load_llama
    from .errors import UsageError

    try:
        llm = load_llama(path, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers)
    except ContextUnavailable as exc:
        if n_ctx_flag is None:
            raise
        raise UsageError(
            f"{n_ctx_flag} {n_ctx} is more context than this machine can hold: llama.cpp "
            f"could not create a context of {n_ctx} tokens for {path}{exc.need}; give a "
            f"smaller {n_ctx_flag}"
        ) from None
    try:
        yield llm
    finally:
        close = getattr(llm, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def token_text_of_file(path: Path) -> Iterator[Callable[[Sequence[int]], str]]:
    """Token ids -> text as a ``Llama`` of ``path`` shows them in logprobs
    (:func:`llamabatch.shapes.responses.token_text`), from the
    file's vocabulary alone (no weights read), freed when the block ends.

    Raises:
        ModelFileError: llama.cpp cannot read the file's vocabulary.
        LibraryError: llama-cpp-python is missing or does not load.
    """
    from .._ffi.vocab_file import VocabFile
    from ..errors import ModelFileError
    from ..shapes.responses import token_text

    try:
        vocab = VocabFile(path)
    except ValueError as exc:
        raise ModelFileError(f"llama.cpp cannot read the vocabulary of {path}: {exc}") from exc
    try:
        yield token_text(vocab)
    finally:
        vocab.close()
