"""Every code block of README.md and docs/*.md runs as shown (tests/docs/snippets.py says
how a block is read and marked).

The blocks of one page run in order in one fresh directory holding a copy of ``examples/``:
Python blocks each in a fresh interpreter (this one), shell blocks with ``bash -eu`` and the
interpreter's ``bin`` first on PATH, console blocks command by command. A console command
must exit 0 unless the output shown after it says ``error:``; the JSON lines it shows must
be exactly the lines it prints (the pages show only deterministic output), and so must a
Python block's output where a ``# prints`` comment shows it. A block that
cannot run here is marked ``<!-- not run: REASON -->`` and counted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from snippets import (
    CODE,
    CODE_WIDTH,
    PAGES,
    ROOT,
    Block,
    blocks,
    code_lines,
    console_commands,
)

#: Blocks marked not runnable (benchmarks, installs, GPU builds, servers, clusters): a new
#: one is a decision, made here.
NOT_RUN = 43  # + the batched_calls commands, host_cost, the floor run, the GPU tier
TIMEOUT = 300  # seconds per block; the slowest runs a 20-item job on 2 cores
RUNNABLE = [p for p in PAGES if any(b.is_code and b.not_run is None for b in blocks(p))]


def _ids(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_block_says_what_it_is(page):
    for block in blocks(page):
        assert block.lang, f"{block.where}: a fence without a language (text, python, sh, ...)"
        if block.not_run is not None:
            assert block.is_code, f"{block.where}: 'not run' marks a code block, not {block.lang}"
            assert len(block.not_run) > 5, f"{block.where}: 'not run' needs its reason"
        if block.lang == "console":
            assert block.code.startswith("$ "), f"{block.where}: a console block starts with $"


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_code_line_fits_the_page(page):
    # longer lines are cut off at the right edge of the column on a 1280 px screen
    wide = [
        f"{page.relative_to(ROOT)}:{number}: {len(line)} characters"
        for block in blocks(page)
        for number, line in code_lines(block)
        if len(line) > CODE_WIDTH
    ]
    assert wide == [], f"code lines over {CODE_WIDTH} characters: break them"


def test_the_count_of_blocks(capsys):
    counts = Counter()
    for page in PAGES:
        for block in blocks(page):
            if block.is_code:
                counts["not run" if block.not_run else "run"] += 1
    with capsys.disabled():
        print(f"\ndoc code blocks: {counts['run']} run, {counts['not run']} marked not run")
    assert counts["not run"] <= NOT_RUN
    assert CODE == {"python", "sh", "bash", "console"}


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # the checkout's llamabatch, also where the venv's is another copy
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["HF_DATASETS_OFFLINE"] = "1"
    env["NO_COLOR"] = "1"
    return env


def _run(args: list[str], block: Block, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=tmp,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _check(done: subprocess.CompletedProcess[str], block: Block, what: str) -> None:
    assert done.returncode == 0, (
        f"{block.where}: {what} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )


def _run_console(block: Block, tmp: Path) -> None:
    for command in console_commands(block.code):
        done = _run(["bash", "-c", command.command], block, tmp)
        if not any("error:" in line for line in command.shown):
            _check(done, block, f"$ {command.command}")
        shown = [line for line in command.shown if line.startswith("{")]
        printed = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if shown:
            assert printed == shown, f"{block.where}: $ {command.command} printed another output"


@pytest.mark.real_model
@pytest.mark.parametrize("page", RUNNABLE, ids=_ids)
def test_every_code_block_runs_as_shown(page, tmp_path, model_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for block in blocks(page):
        if block.file is not None:
            target = tmp_path / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
            continue
        if not block.is_code or block.not_run is not None:
            continue
        if block.lang == "python":
            done = _run([sys.executable, "-c", block.code], block, tmp_path)
            _check(done, block, "python")
            if block.prints is not None:
                printed = ", ".join(done.stdout.splitlines())
                assert printed == block.prints, f"{block.where}: printed {printed!r}"
        elif block.lang == "console":
            _run_console(block, tmp_path)
        else:
            _check(_run(["bash", "-eu", "-c", block.code], block, tmp_path), block, "bash")
