"""The command line is the top of the package: no module outside ``llamabatch/cli/``
imports ``llamabatch.cli`` (the library, the pool of servers and Ray never reach up into
the command), save ``llamabatch/__main__.py``, which runs the command. Read from the
source of every module (:mod:`import_reader`), function-level imports included."""

from __future__ import annotations

from pathlib import Path

from import_reader import imported_names, modules_of

import llamabatch

PACKAGE_DIR = Path(llamabatch.__file__).parent


def _of_the_cli(name: str) -> bool:
    return name == "llamabatch.cli" or name.startswith("llamabatch.cli.")


def test_no_module_outside_the_cli_imports_the_cli() -> None:
    modules = [
        (module, path)
        for module, path in modules_of(PACKAGE_DIR, "llamabatch")
        if not _of_the_cli(module) and module != "llamabatch.__main__"
    ]
    assert {m for m, _ in modules} >= {"llamabatch.remote.generator", "llamabatch.ray.job"}
    up = {
        module: found
        for module, path in modules
        if (found := [n for n in imported_names(module, path.read_text()) if _of_the_cli(n)])
    }
    assert not up, up


def test_the_check_sees_a_relative_import_of_the_cli_inside_a_function() -> None:
    source = "def f():\n    from ..cli.common import UsageError\n"
    assert "llamabatch.cli.common" in imported_names("llamabatch.remote.x", source)
