"""The fenced code blocks of README.md and docs/*.md, as the snippet tests read them.

A block's language says what it is: ``python``, ``sh``/``bash`` (a script) and ``console``
(``$ command`` lines, each followed by the output it shows) are code and run; anything else
(``text``, ``json``, ``yaml``) is shown data. Two HTML comments on the line right above a
fence change that: ``<!-- not run: REASON -->`` marks a code block that cannot run on a test
machine (the reason is required and is counted), ``<!-- file: PATH -->`` writes the block to
PATH in the page's working directory before the blocks after it run. A ``# prints TEXT``
comment in a Python block is what the block prints: its output lines joined by ``", "``
(so a page shows only output that every machine prints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
CODE = frozenset({"python", "sh", "bash", "console"})
#: Blocks whose lines are code a reader copies (a console block: its ``$`` commands), held
#: to :data:`CODE_WIDTH`; shown output and data (``text``, ``json``, a console block's
#: output) are what a program prints and stay as printed (docs/css/extra.css wraps them).
WIDTH_HELD = CODE | {"powershell"}
#: The longest code line the site shows whole at 1280 px and wider (docs/css/extra.css).
CODE_WIDTH = 88

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->$")
FILE = re.compile(r"^<!--\s*file:\s*(?P<path>\S+)\s*-->$")
PRINTS = re.compile(r"#\s*prints\s+(?P<text>.*?)\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None = None  # the reason, when marked not runnable
    file: str | None = None  # where the page's blocks write it

    @property
    def is_code(self) -> bool:
        return self.lang in CODE

    @property
    def prints(self) -> str | None:
        """The output a Python block's ``# prints TEXT`` comment shows, or ``None``."""
        if self.lang != "python":
            return None
        found = [m["text"] for m in map(PRINTS.search, self.code.splitlines()) if m]
        return found[0] if found else None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` in order, with the marker right above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = len(opening["indent"])
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        above = lines[i - 1].strip() if i > 0 else ""
        not_run, file = NOT_RUN.match(above), FILE.match(above)
        found.append(
            Block(
                page,
                i + 1,
                opening["lang"],
                code,
                not_run["reason"] if not_run else None,
                file["path"] if file else None,
            )
        )
        i = end + 1
    return found


@dataclass(frozen=True)
class Command:
    command: str
    shown: list[str]  # the output lines the page shows after it


def console_commands(code: str) -> list[Command]:
    """The ``$ `` commands of a console block (a trailing backslash continues one) and the
    output lines shown after each."""
    commands: list[Command] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if commands:
                commands[-1].shown.append(line)
            i += 1
            continue
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command += "\n" + lines[i]
        commands.append(Command(command, []))
        i += 1
    return commands


def code_lines(block: Block) -> list[tuple[int, str]]:
    """(page line number, text) of the lines of ``block`` that are code: every line of a
    :data:`WIDTH_HELD` block, but of a console block only its ``$`` commands and the lines
    a trailing backslash continues them on."""
    if block.lang not in WIDTH_HELD:
        return []
    found, going = [], False
    for k, line in enumerate(block.code.splitlines()):
        is_code = block.lang != "console" or line.startswith("$ ") or going
        going = block.lang == "console" and is_code and line.endswith("\\")
        if is_code:
            found.append((block.line + 1 + k, line))
    return found
