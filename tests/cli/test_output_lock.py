"""``llamabatch complete``'s lock on OUT where Python has no ``fcntl`` (Windows).

There the lock is ``msvcrt.locking``. These tests run the command in a child interpreter
that has no ``fcntl`` and a stand-in ``msvcrt`` whose ``locking`` behaves as the C
runtime's ``_locking`` (a byte range from the file position; ``LK_NBLCK`` fails at once
with ``EACCES`` when another process holds it), backed by POSIX record locks. The POSIX
lock itself is tested in test_resume.py.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import textwrap
from pathlib import Path

from cli_util import read_jsonl, single_error_line

NO_MODEL = "no-model.gguf"  # a path that does not exist: these jobs must not load a model

#: A stand-in for Windows' msvcrt: ``locking`` as the C runtime's, over POSIX record locks.
FAKE_MSVCRT = """
import errno
import fcntl as _posix
import os

LK_UNLCK, LK_LOCK, LK_NBLCK, LK_RLCK, LK_NBRLCK = 0, 1, 2, 3, 4
calls = []


def locking(fd, mode, nbytes):
    assert mode == LK_NBLCK, mode
    start = os.lseek(fd, 0, os.SEEK_CUR)  # _locking locks from the file position
    calls.append((start, nbytes))
    try:
        _posix.lockf(fd, _posix.LOCK_EX | _posix.LOCK_NB, nbytes, start, os.SEEK_SET)
    except OSError:
        raise PermissionError(errno.EACCES, "Permission denied") from None
"""

#: The command in an interpreter without fcntl (as on Windows); prints msvcrt's calls.
#: ``subprocess`` and ``asyncio`` tell Windows by whether msvcrt imports: they are
#: imported before the stand-in is.
WITHOUT_FCNTL = """
import asyncio, importlib.util, subprocess, sys
spec = importlib.util.spec_from_file_location("msvcrt", sys.argv.pop(1))
msvcrt = sys.modules["msvcrt"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(msvcrt)
sys.modules["fcntl"] = None  # import fcntl now fails, as on Windows
from llamabatch.cli.main import main
code = main(sys.argv[1:])
print("locking calls:", len(msvcrt.calls))
sys.exit(code)
"""


def _run_without_fcntl(tmp_path: Path, *argv: object) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "msvcrt.py"
    fake.write_text(textwrap.dedent(FAKE_MSVCRT), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_FCNTL, str(fake), *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _bad_input(tmp_path: Path) -> Path:
    """Three malformed lines: with --skip-bad their error lines need no model."""
    path = tmp_path / "in.jsonl"
    path.write_text("one\ntwo\nthree\n", encoding="utf-8")
    return path


def test_without_fcntl_a_job_locks_its_output_and_appends_to_it(tmp_path):
    out_path = tmp_path / "out.jsonl"
    args = ("complete", _bad_input(tmp_path), "-o", out_path, "--skip-bad", "--quiet")
    done = _run_without_fcntl(tmp_path, *args, "--model", tmp_path / NO_MODEL)
    assert done.returncode == 0, done.stderr
    assert "locking calls: 1" in done.stdout
    assert [r["id"] for r in read_jsonl(out_path)] == [1, 2, 3]
    # the lock's position is not where lines go: a resumed job appends after them
    again = _run_without_fcntl(tmp_path, *args, "--resume", "--model", tmp_path / NO_MODEL)
    assert again.returncode == 0, again.stderr
    assert "locking calls: 1" in again.stdout
    assert [r["id"] for r in read_jsonl(out_path)] == [1, 2, 3]
    assert out_path.stat().st_size < 4096


def test_without_fcntl_an_output_locked_by_another_job_is_refused(tmp_path):
    out_path = tmp_path / "out.jsonl"
    with open(out_path, "a") as other:
        fcntl.lockf(other.fileno(), fcntl.LOCK_EX)  # the whole file, as far as it may grow
        done = _run_without_fcntl(
            tmp_path,
            "complete",
            _bad_input(tmp_path),
            "-o",
            out_path,
            "--skip-bad",
            "--model",
            tmp_path / NO_MODEL,
        )
    assert done.returncode == 2, done.stderr
    line = single_error_line(done.stderr)
    assert f"output {out_path} is locked: another job is writing it" in line
    assert out_path.read_text() == ""
