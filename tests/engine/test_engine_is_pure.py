"""``llamabatch.engine`` is pure Python: none of its modules imports llama_cpp, numpy or
``llamabatch._ffi`` (nor ``llamabatch.llamacpp``, which does).

Two checks: a static one over the source of every module of the package (every
``import`` statement, function-level ones included, and ``importlib.import_module`` /
``__import__`` calls with a literal name), and a fresh interpreter that blocks llama_cpp
and numpy, imports every module and finds no native-facing module loaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from import_reader import imported_names, modules_of

import llamabatch.engine

FORBIDDEN = ("llama_cpp", "numpy", "llamabatch._ffi", "llamabatch.llamacpp")
ENGINE_DIR = Path(llamabatch.engine.__file__).parent


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_static_check_sees_every_kind_of_import() -> None:
    source = (
        "import numpy as np\n"
        "def f():\n"
        "    from .. import _ffi\n"
        "    import importlib\n"
        "    importlib.import_module('llama_cpp')\n"
        "from ..llamacpp.backend import LlamaBackend\n"
        "from .plan import plan_step\n"
    )
    bad = [n for n in imported_names("llamabatch.engine.x", source) if _forbidden(n)]
    assert set(bad) == {
        "numpy",
        "llamabatch._ffi",
        "llama_cpp",
        "llamabatch.llamacpp.backend",
        "llamabatch.llamacpp.backend.LlamaBackend",
    }


def test_no_engine_module_imports_a_native_facing_module() -> None:
    modules = modules_of(ENGINE_DIR, "llamabatch.engine")
    assert {m.rsplit(".", 1)[-1] for m, _ in modules} >= {
        "scheduler",
        "slot_engine",
        "backend",
        "labels",
        "samples",
    }
    bad = {
        module: found
        for module, path in modules
        if (found := [n for n in imported_names(module, path.read_text()) if _forbidden(n)])
    }
    assert not bad, bad


SCRIPT = r"""
import importlib, importlib.abc, pkgutil, sys


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("llama_cpp", "numpy"):
            raise ImportError(f"{name} is blocked in this test")
        return None


sys.meta_path.insert(0, Block())
import llamabatch.engine
for info in pkgutil.walk_packages(llamabatch.engine.__path__, "llamabatch.engine."):
    importlib.import_module(info.name)
loaded = [m for m in sys.modules if m.split(".")[0] in ("llama_cpp", "numpy")
          or m.startswith(("llamabatch._ffi", "llamabatch.llamacpp"))]
assert not loaded, loaded
print("ok")
"""


def test_importing_every_engine_module_loads_no_native_facing_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
