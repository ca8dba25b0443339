"""The Python examples of docs/embedding.md and docs/migrating.md run as shown, on the
default model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
EXAMPLES = [
    pytest.param(code, id=f"{page}-{k}")
    for page in ("embedding.md", "migrating.md")
    for k, code in enumerate(BLOCK.findall((DOCS / page).read_text(encoding="utf-8")))
]


@pytest.mark.parametrize("code", EXAMPLES)
def test_the_example_runs_as_shown(code, capsys):
    exec(compile(code, "<docs example>", "exec"), {"__name__": "__main__"})  # noqa: S102
    assert capsys.readouterr().out.strip()  # it printed its result
