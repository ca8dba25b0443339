"""What a module of the package imports, read from its source (no import is run): every
``import`` statement, function-level ones included, and ``importlib.import_module`` /
``__import__`` calls with a literal name. The import-rule tests read it."""

from __future__ import annotations

import ast
from pathlib import Path


def modules_of(folder: Path, package: str) -> list[tuple[str, Path]]:
    """Every module of ``package`` (its ``folder``), subpackages included, with its path
    (an ``__init__`` is named as its package's ``__init__`` module, so relative imports
    resolve from the package)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        found.append((".".join((package, *path.relative_to(folder).with_suffix("").parts)), path))
    return found


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The absolute names ``node`` (in ``module``) imports: ``from .. import _ffi`` in
    ``llamabatch.engine.x`` names ``llamabatch._ffi``."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")[: -node.level]  # a module: its package is parts[:-1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def imported_names(module: str, source: str) -> list[str]:
    """Every module name the source of ``module`` may import, wherever the statement is."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += _resolve(module, node)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if called in ("import_module", "__import__") and isinstance(arg, ast.Constant):
                names.append(str(arg.value))
    return names
