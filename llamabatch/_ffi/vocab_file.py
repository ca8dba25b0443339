"""A GGUF file's vocabulary alone (``vocab_only``: no weights read): the text of token ids
where no ``Llama`` is loaded (the driver of ``llamabatch complete --ray``)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

from .resolve import import_binding


class VocabFile:
    """The vocabulary of a GGUF file, through the binding's own ``LlamaModel`` (opened
    ``vocab_only``), whose ``detokenize`` is the one ``Llama.detokenize`` calls: the same
    bytes as a loaded ``Llama`` gives. :meth:`close` frees it.

    Raises:
        LibraryError: llama-cpp-python is missing, outside the supported range or does not
            load.
        ValueError: llama.cpp cannot open ``path`` as a GGUF model.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        module, _ = import_binding()
        internals: Any = importlib.import_module("llama_cpp._internals")
        params = module.llama_model_default_params()
        params.vocab_only = True
        self._model: Any = internals.LlamaModel(
            path_model=os.fspath(path), params=params, verbose=False
        )

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """``Llama.detokenize(tokens)``: the bytes of the tokens' pieces, special tokens
        left out."""
        return bytes(self._model.detokenize(list(tokens)))

    def close(self) -> None:
        """Free the vocabulary (callable many times)."""
        model, self._model = self._model, None
        if model is not None:
            model.close()
