"""A stand-in for llama-cpp-python whose first decode dies by SIGSEGV, as a native
llama.cpp build does on a CPU that advertises Intel AMX inside a VM that does not enable
the AMX tile state. Its load prints the log lines llama.cpp prints when it repacks
weights for AMX. Put this directory first on ``PYTHONPATH`` to use it; tests only."""

from __future__ import annotations

import os
import signal
import sys

__version__ = "0.3.36"

#: Set to "load" to die already while loading, else the first decode dies.
CRASH_AT_ENV = "LLAMABATCH_STAND_IN_CRASH_AT"


def _die() -> None:
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSEGV)


class Llama:
    """Loads nothing; ``create_completion`` and ``eval`` die by SIGSEGV."""

    def __init__(self, model_path: str, n_ctx: int = 512, verbose: bool = True, **_: object):
        self._n_ctx = n_ctx
        if verbose:
            print("load_tensors:          AMX model buffer size =    20.25 MiB", file=sys.stderr)
            print(
                "ggml_backend_amx_buffer_set_tensor: amx repack tensor blk.0.attn_q.weight "
                "of type q4_1",
                file=sys.stderr,
            )
        if os.environ.get(CRASH_AT_ENV) == "load":
            _die()

    def n_vocab(self) -> int:
        return 260

    def n_ctx(self) -> int:
        return self._n_ctx

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return ([1] if add_bos else []) + list(text)

    def create_completion(self, prompt: object, **_: object) -> dict:
        _die()
        raise AssertionError("unreachable")

    def eval(self, tokens: object) -> None:
        _die()

    def close(self) -> None:
        pass
