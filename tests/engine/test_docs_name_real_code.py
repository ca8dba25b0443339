"""docs/engine.md's table of modules names files that exist and, in backticks, only
names those modules define (or ``BatchGenerator`` parameters)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from llamabatch import BatchGenerator

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(llamabatch/[\w/]+\.py)` \| (.*) \|$", re.M)


def test_every_module_and_name_in_the_engine_table_exists() -> None:
    rows = ROW.findall((ROOT / "docs" / "engine.md").read_text(encoding="utf-8"))
    assert len(rows) >= 7
    params = set(inspect.signature(BatchGenerator.__init__).parameters)
    missing = []
    for path, text in rows:
        if not (ROOT / path).is_file():
            missing.append(path)
            continue
        module = importlib.import_module(path[:-3].replace("/", "."))
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", text):
            head, _, attr = name.partition(".")
            obj = getattr(module, head, None)
            if obj is None and head not in params:
                missing.append(f"{path}: {name}")
            elif attr and not hasattr(obj, attr):
                missing.append(f"{path}: {name}")
    assert missing == []
