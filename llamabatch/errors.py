"""Every error llamabatch raises on purpose: a :class:`LlamaBatchError` (the only one
:mod:`llamabatch` exports), defined here; the command line's own two are in
:mod:`llamabatch.cli.errors`. ``DecodeError`` and ``BatchUnavailable`` are raised by
backends and never reach a caller of ``BatchGenerator``. An error from a llama.cpp call
carries its return code in ``.code`` (as python-soundfile's ``LibsndfileError``).
"""

from __future__ import annotations


class LlamaBatchError(Exception):
    """Base class of every error llamabatch raises on purpose."""


class BackendError(LlamaBatchError):
    """A call into the backend (llama.cpp, or the fake) failed.

    Attributes:
        code: the return code of the failing C call, or ``None``.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class DecodeError(BackendError):
    """``llama_decode`` returned non-zero (``.code``: :func:`decode_meaning`)."""


class BatchUnavailable(BackendError):
    """``Backend.open`` could not create the batch context (memory, a missing symbol ...)."""


class LibraryError(LlamaBatchError):
    """llama-cpp-python's shared library or one of its essential symbols is missing.

    Its message ends with :attr:`HINT`: ``llamabatch doctor`` checks the installation.
    """

    #: Appended to every message: where to look next.
    HINT = "run `llamabatch doctor` to check llama-cpp-python and llama.cpp on this machine"

    def __str__(self) -> str:
        text = super().__str__()
        return text if self.HINT in text else f"{text} ({self.HINT})"


class ParameterError(LlamaBatchError, ValueError):
    """A parameter outside its valid range, named as the caller gave it (``slots=0``);
    the command line names the flag that set it (``--slots 0``).

    Attributes:
        name, value: the parameter and the value given.
        valid: what would be valid (``"an integer >= 1"``).
    """

    def __init__(self, name: str, value: object, valid: str) -> None:
        super().__init__(f"{name}={value!r} is out of range: valid is {valid}")
        self.name, self.value, self.valid = name, value, valid


class GrammarError(LlamaBatchError, ValueError):
    """A grammar (GBNF text, or one made from ``json_schema`` / ``choices``) that
    llama.cpp refuses (``llama_sampler_init_grammar`` returned NULL), or that allows no
    token at some step. It is the error of the items that use it; others go on."""


class Closed(LlamaBatchError, ValueError):
    """An object was used after its ``close()``, or after its ``Llama``'s (a ``ValueError``,
    as Python's closed files raise)."""


class GeneratorClosed(Closed):
    """A closed :class:`~llamabatch.BatchGenerator` was used."""


class ModelError(LlamaBatchError):
    """A model could not be had: base of :class:`ModelFetchError` and :class:`ModelFileError`."""


class ModelFetchError(ModelError, RuntimeError):
    """The default model could not be fetched (pip failed, no network, bad checksum)."""


class ModelFileError(ModelError, ValueError):
    """A model path is missing, unreadable, not a GGUF file, or llama.cpp refused it."""


class ContextUnavailable(ModelError, ValueError):
    """llama.cpp loaded the model but could not create the ``Llama``'s context of
    ``n_ctx`` tokens (most often too little memory for its KV cache, estimated in
    ``kv_bytes``, ``None`` when unknown; ``need`` says it in words, or is empty); the
    model file is fine."""

    def __init__(
        self, message: str, n_ctx: int, kv_bytes: int | None = None, need: str = ""
    ) -> None:
        super().__init__(message)
        self.n_ctx = n_ctx
        self.kv_bytes = kv_bytes
        self.need = need


class ChatTemplateError(LlamaBatchError, ValueError):
    """The model has no chat template, or its template is not valid Jinja."""


class GeneratorBusy(LlamaBatchError, RuntimeError):
    """A thread started a second run of a :class:`~llamabatch.BatchGenerator` while its
    own first run (an unfinished ``iter_groups``) still holds the slots, or waited for items
    on the engine thread that alone completes them (in a submitted item's done-callback)."""


# -- the pool of servers (llamabatch.remote) ---------------------------------------------
class PoolUnavailable(LlamaBatchError):
    """No server of the pool answered for ``give_up_s`` seconds (or, when none could
    be connected to since the start, ``connect_give_up_s``)."""


class ServerFault(LlamaBatchError):
    """The server failed this exchange; another server may succeed.

    Attributes:
        reached: False when no connection to the server could be made (refused, no
            such host, connect timeout): nothing is listening there, or the URL is wrong.
    """

    def __init__(self, message: str, reached: bool = True) -> None:
        super().__init__(message)
        self.reached = reached


class ItemRejected(LlamaBatchError):
    """The server refused the request itself (a 4xx other than 408 and 429)."""


class BadItem(LlamaBatchError, ValueError):
    """An item that cannot become a request; its message is the item's error."""


class ServerStartError(LlamaBatchError):
    """A local server process (:class:`llamabatch.testing.servers.LocalServer`) exited,
    or did not answer within the time allowed."""


_DECODE_MEANINGS = {
    0: "ok",
    1: "no KV cache slot for the batch (state restored)",
    2: "aborted",
    -1: "invalid batch",
}


def decode_meaning(code: int) -> str:
    """Say what a ``llama_decode`` return code means (llama.h comments)."""
    if code in _DECODE_MEANINGS:
        return _DECODE_MEANINGS[code]
    return "fatal error" if code < -1 else "unknown warning"


class GrammarDeadEnd(GrammarError):
    """The grammar of one sequence allows no token of the vocabulary here; nothing was
    accepted into it (its item ends with this error, the others go on).

    Attributes:
        n_accepted: reply tokens the grammar had accepted before the dead end.
    """

    def __init__(self, message: str, n_accepted: int = 0) -> None:
        super().__init__(message)
        self.n_accepted = n_accepted


class RayJobError(LlamaBatchError):
    """Ray could not run the job (no cluster at the address, an actor that cannot load
    the model, a failure Ray gave up retrying); the message says which
    (:mod:`llamabatch.ray`)."""


class PlotUnavailable(LlamaBatchError, ImportError):
    """matplotlib is not installed; the message says how to get it
    (:mod:`llamabatch.measure.plot`)."""
