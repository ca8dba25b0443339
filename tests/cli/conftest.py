"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    """A JSONL prompts file of one item: id ``"a"``, prompt ``"hello"``."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "prompt": "hello"}\n', encoding="utf-8")
    return path
