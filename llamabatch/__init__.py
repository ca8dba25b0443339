"""llamabatch: batched generation of many short prompts on a loaded ``llama_cpp.Llama``.

What a user calls: :class:`BatchGenerator` (its keyword arguments, or a ready
:class:`BatchConfig`), :class:`SamplingParams`, what comes back (:class:`Completion`,
:class:`Sample`, :class:`Stats`, :class:`KvEstimate`), :class:`ChatTemplate`,
:func:`llm_lock`, :func:`tune`, and :func:`create_completions` /
:func:`create_chat_completions` (llama-cpp-python's calls, batched). Every error derives
from :class:`LlamaBatchError`; the errors themselves are in :mod:`llamabatch.errors`. A
custom backend implements :class:`llamabatch.engine.Backend`. Importing this package
loads no native library.
"""

from .chat import ChatTemplate
from .completion import Completion, Sample
from .errors import LlamaBatchError
from .generator import BatchGenerator, create_chat_completions, create_completions
from .kv_estimate import KvEstimate
from .locks import llm_lock
from .measure.report import TuneReport
from .measure.tune import tune
from .params import BatchConfig, SamplingParams
from .stats import Stats

__all__ = [
    "BatchConfig",
    "BatchGenerator",
    "ChatTemplate",
    "Completion",
    "KvEstimate",
    "LlamaBatchError",
    "Sample",
    "SamplingParams",
    "Stats",
    "TuneReport",
    "create_chat_completions",
    "create_completions",
    "llm_lock",
    "tune",
]
__version__ = "0.1.0"
