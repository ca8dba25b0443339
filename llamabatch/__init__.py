"""llamabatch: batched generation of many short prompts on a loaded ``llama_cpp.Llama``.

Public names only. Importing this package loads no native library.
"""

from .completion import Completion, Stats
from .errors import (
    BackendError,
    BatchUnavailable,
    ChatTemplateError,
    Closed,
    DecodeError,
    GeneratorBusy,
    GeneratorClosed,
    GrammarError,
    LibraryError,
    LlamaBatchError,
    ModelError,
    ModelFetchError,
    ModelFileError,
    OutputCorrupt,
    UsageError,
)
from .generator import BatchGenerator
from .locks import llm_lock
from .params import BatchConfig, SamplingParams
from .tuning import TuneReport, tune

__all__ = [
    "BackendError",
    "BatchConfig",
    "BatchGenerator",
    "BatchUnavailable",
    "ChatTemplateError",
    "Closed",
    "Completion",
    "DecodeError",
    "GeneratorBusy",
    "GeneratorClosed",
    "GrammarError",
    "LibraryError",
    "LlamaBatchError",
    "ModelError",
    "ModelFetchError",
    "ModelFileError",
    "OutputCorrupt",
    "SamplingParams",
    "Stats",
    "TuneReport",
    "UsageError",
    "llm_lock",
    "tune",
]
__version__ = "0.1.0"
