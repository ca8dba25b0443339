"""llamabatch: batched generation of many short prompts on a loaded ``llama_cpp.Llama``.

Public names only: what a user calls or catches. Importing this package loads no native
library. The parameters of a run are ``BatchGenerator``'s own keyword arguments
(``llamabatch.params.BatchConfig`` is the checked bundle it makes of them, not a second
way in). Errors that never reach a caller of ``BatchGenerator`` (``DecodeError``,
``BatchUnavailable``), the pool of servers' and the command line's are not exported
here: see :mod:`llamabatch.errors`, :mod:`llamabatch.remote`, :mod:`llamabatch.cli.errors`.
"""

from .completion import Completion, Stats
from .errors import (
    BackendError,
    ChatTemplateError,
    Closed,
    GeneratorBusy,
    GeneratorClosed,
    GrammarError,
    LibraryError,
    LlamaBatchError,
    ModelError,
    ModelFetchError,
    ModelFileError,
)
from .generator import BatchGenerator
from .locks import llm_lock
from .params import SamplingParams
from .tuning import TuneReport, tune

__all__ = [
    "BackendError",
    "BatchGenerator",
    "ChatTemplateError",
    "Closed",
    "Completion",
    "GeneratorBusy",
    "GeneratorClosed",
    "GrammarError",
    "LibraryError",
    "LlamaBatchError",
    "ModelError",
    "ModelFetchError",
    "ModelFileError",
    "SamplingParams",
    "Stats",
    "TuneReport",
    "llm_lock",
    "tune",
]
__version__ = "0.1.0"
