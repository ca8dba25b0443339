"""Test helper: the start of a script for a fresh interpreter in which llama-cpp-python
is not installed (``import llama_cpp`` fails, and so does reading its package metadata).

Import it from any test (``from without_llama_cpp import WITHOUT_LLAMA_CPP``): pytest
puts ``tests/`` on ``sys.path`` for ``tests/conftest.py``.
"""

WITHOUT_LLAMA_CPP = r"""
import importlib.abc
import importlib.metadata
import sys


class BlockLlamaCpp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked in this test)")
        return None


_real_version = importlib.metadata.version


def _version(name):
    if name.replace("_", "-").lower() == "llama-cpp-python":
        raise importlib.metadata.PackageNotFoundError(name)
    return _real_version(name)


sys.meta_path.insert(0, BlockLlamaCpp())
importlib.metadata.version = _version
"""
