"""The options the documentation gives each command are those of its ``--help``: every
option of ``llamabatch CMD --help`` is named on the command's pages (in an options table
for ``complete``), and every option an options table names exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from snippets import ROOT

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
DEFINED = re.compile(r"^  (?:-\w[ ,\w]*, )?(--[a-z][a-z0-9-]*)", re.MULTILINE)  # in --help
ROW = re.compile(r"^\| `(-[^|]*)` \|", re.MULTILINE)  # a table row whose first cell is an option

#: command -> (its pages, whether its options must be in those pages' tables)
PAGES = {
    "complete": (["cli.md", "pool.md", "ray.md"], True),
    "tune": (["tune.md"], False),
    "bench": (["bench.md"], False),
    "doctor": (["doctor.md"], False),
    "eval": (["lm-eval.md"], False),
}


def _help(command: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "llamabatch", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200"),
        check=True,
    )
    return set(DEFINED.findall(done.stdout)) - {"--help"}


def _tables(text: str) -> set[str]:
    return {o for cell in ROW.findall(text) for o in OPTION.findall(cell)}


@pytest.mark.parametrize("command", sorted(PAGES))
def test_the_pages_name_every_option_of_the_help(command):
    pages, in_tables = PAGES[command]
    text = "\n".join((ROOT / "docs" / p).read_text(encoding="utf-8") for p in pages)
    named = _tables(text) if in_tables else set(OPTION.findall(text))
    missing = sorted(_help(command) - named)
    assert missing == [], f"llamabatch {command} --help has options {pages} do not name"


@pytest.mark.parametrize("command", sorted(PAGES))
def test_every_option_in_a_table_exists(command):
    pages, _ = PAGES[command]
    tables = _tables("\n".join((ROOT / "docs" / p).read_text(encoding="utf-8") for p in pages))
    unknown = sorted(tables - _help(command))
    assert unknown == [], f"{pages} give llamabatch {command} options its --help lacks"
