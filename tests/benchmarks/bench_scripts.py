"""Load a script of ``benchmarks/`` (no package, some without ``.py``) as a module, for the
tests beside this file (``from bench_scripts import load_script``: pytest puts this
folder on ``sys.path``)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def stand_in(folder: Path, name: str, script: str) -> Path:
    """An executable ``folder/name`` running ``script`` (a Python program whose first line
    is ``#!{python}``, filled with this interpreter; other braces doubled)."""
    tool = folder / name
    tool.write_text(script.format(python=sys.executable))
    tool.chmod(0o755)
    return tool


def load_script(name: str, path: Path) -> ModuleType:
    """The script at ``path`` run as the module ``name`` (registered in ``sys.modules``,
    so that its dataclasses and pickling find it)."""
    loader = SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
