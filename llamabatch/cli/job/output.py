"""The output of ``llamabatch complete``: opening it (new, ``--overwrite``, ``--resume``)
and writing records, one JSON object per line, flushed and fsynced after each batch.

An existing non-empty output file is never overwritten by accident: the job refuses to
start unless ``--resume`` (continue it: skip the ids already there, after removing a
cut-off last line) or ``--overwrite`` (replace it) is given. The file is locked while
the job runs, so two jobs cannot write one output at once: ``flock`` on POSIX systems,
``msvcrt.locking`` of one byte far past any data on Windows (a Windows lock also bars
reads through other handles, so it holds no byte a reader needs).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import errno
import importlib
import itertools
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ...completion import Completion
from ...shapes.responses import output_record
from ..common import UsageError
from ..errors import OutputWriteError
from .input import BadLine, LineItem
from .resume import OutputCorrupt, line_key, scan_output

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
#: Windows' C runtime locking (``msvcrt.locking``) where there is no ``fcntl``.
msvcrt: Any = None if fcntl is not None else importlib.import_module("msvcrt")
#: The byte a Windows lock holds (1 TiB): past the end of any output, so that reading the
#: file through another handle (``--resume`` scans it, a user looks) never meets a locked
#: byte, and within the largest file NTFS and common POSIX file systems allow.
WINDOWS_LOCK_OFFSET = 2**40


def completion_record(item: LineItem, completion: Completion) -> dict[str, Any]:
    """The output object of one item: id, text, finish_reason, error, token counts,
    path, then the optional outputs it holds (``logprobs`` ...:
    :func:`llamabatch.shapes.responses.output_record`)."""
    return {"id": item.id, **output_record(completion)}


def error_record(bad: BadLine) -> dict[str, Any]:
    """The output object of a bad input line (``--skip-bad``): an item's, failed before any
    decode (``path`` ``"alone"``)."""
    return {"id": bad.id, **output_record(Completion(0, "", (), "error", bad.error, 0, "alone"))}


@dataclass(slots=True)
class Output:
    """An open output.

    Attributes:
        stream: where records go.
        where: its name for messages (the path, or ``"standard output"``).
        is_file: True for a file given with ``-o`` (a job on it can be resumed).
        done: :func:`~llamabatch.cli.job.input.id_key` of the ids already in it (``--resume``).
        ids: the same, in the file's order.
        n_existing: whole lines already in it (``--resume``).
        path: the file when it is a regular file (its input's fingerprint is kept beside
            it: :mod:`.resume`), else ``None``.
        errors: :func:`~llamabatch.cli.job.input.id_key` of the ids of its error lines
            (``--resume``).
        formats: the ``--output-format`` of the lines already in it (``--resume``).
    """

    stream: IO[str]
    where: str
    is_file: bool
    done: frozenset[str] = frozenset()
    ids: tuple[str, ...] = ()
    n_existing: int = 0
    path: Path | None = None
    _fsync: bool = False
    errors: frozenset[str] = frozenset()
    formats: frozenset[str] = frozenset()
    _keys: dict[str, str] = dataclasses.field(default_factory=dict)

    def rekey(self, keys: dict[str, str]) -> None:
        """Read the ids of the lines already in it as ``keys`` maps them (a Batch API
        line's ``custom_id`` ``"7"`` back to the input's id ``7``); others stay."""
        self._keys = keys
        self.ids = tuple(keys.get(k, k) for k in self.ids)
        self.done = frozenset(keys.get(k, k) for k in self.done)
        self.errors = frozenset(keys.get(k, k) for k in self.errors)

    def _key(self, raw: bytes) -> str:
        key = line_key(json.loads(raw))
        return self._keys.get(key, key)

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        """Write records, one JSON line each, then flush and (for a file) fsync. A file
        gets the bytes straight from here (no buffer left to write at its close), so a
        failure knows how many lines reached it.

        Raises:
            OutputWriteError: the output cannot be written (named, with the cause and,
                for a file, that ``--resume`` continues the job after its last whole
                line); its ``written`` counts the whole lines of these records that
                reached the output.
        """
        lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records]
        sent = 0
        try:
            if not self.is_file:
                for line in lines:
                    self.stream.write(line)
                self.stream.flush()
                return
            data = [line.encode("utf-8") for line in lines]
            ends = list(itertools.accumulate(len(b) for b in data))
            buffer = memoryview(b"".join(data))
            while sent < len(buffer):
                sent += os.write(self.stream.fileno(), buffer[sent:])
            if self._fsync:
                os.fsync(self.stream.fileno())
        except OSError as exc:
            written = bisect.bisect_right(ends, sent) if self.is_file else 0
            cause = exc.strerror or str(exc)
            if exc.errno == errno.ENOSPC:
                cause = "no space left on the device (the disk is full)"
            how = (
                "; its whole lines are kept: make room, then run the same command with "
                "--resume to continue after them (a cut-off last line is removed)"
                if self.path is not None
                else ""
            )
            raise OutputWriteError(
                f"cannot write the output {self.where}: {cause}{how}", written=written
            ) from exc

    def drop(self, keys: frozenset[str]) -> None:
        """Remove the lines of the ids ``keys`` (:func:`~.resume.line_key`) from the file,
        keeping the others in their order (``--resume`` redoes those items). The file is
        cut before the first of them and the rest written again: a kill meanwhile leaves
        whole lines and maybe a cut one, which the next ``--resume`` repairs and redoes.

        Raises:
            OutputWriteError: the file cannot be rewritten.
        """
        if not keys or self.path is None:
            return
        fd = self.stream.fileno()
        try:
            with open(self.path, "rb") as existing:
                lines = existing.readlines()
            gone = {k for k, raw in enumerate(lines) if raw.strip() and self._key(raw) in keys}
            if not gone:
                return
            first = min(gone)  # the lines before it stay where they are
            tail = b"".join(raw for k, raw in enumerate(lines) if k > first and k not in gone)
            os.ftruncate(fd, sum(len(raw) for raw in lines[:first]))
            sent = 0
            while sent < len(tail):
                sent += os.write(fd, tail[sent:])
            os.fsync(fd)
        except OSError as exc:
            raise OutputWriteError(
                f"cannot rewrite the output {self.where} without its {len(keys)} error "
                f"lines to do again: {exc.strerror or exc}"
            ) from exc
        self.ids = tuple(k for k in self.ids if k not in keys)
        self.done, self.errors = self.done - keys, self.errors - keys
        self.n_existing = len(self.ids)


@contextlib.contextmanager
def open_output(
    path: Path | None,
    prompts: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    warn: Callable[[str], None] = lambda message: None,
) -> Iterator[Output]:
    """Open the output of a job (``path``, or standard output when ``None``).

    Args:
        path: the output file, created if missing.
        prompts: the input file (the output must not be it).
        resume: keep what the file holds and report its ids in ``Output.done``; a cut-off
            last line is removed, and said with ``warn``.
        overwrite: empty a non-empty file.
        warn: called with a one-line message when the file is repaired.

    Raises:
        UsageError: the output is the prompts file, cannot be opened, is locked by another
            job, is not empty and neither ``resume`` nor ``overwrite`` is given, or (with
            ``resume``) holds a whole line that is not a JSON object with an id;
            ``resume`` with standard output.
    """
    if path is None:
        if resume:
            raise UsageError(
                "--resume needs an output file (-o OUT): standard output cannot be resumed"
            )
        yield Output(sys.stdout, "standard output", is_file=False)
        return
    with contextlib.suppress(OSError):
        if path.resolve() == prompts.resolve():
            raise UsageError(f"output {path} is the prompts file")
    try:
        f = open(path, "a", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write output {path}: {exc.strerror or exc}") from None
    try:
        _lock(f, path)
        yield _prepare(f, path, resume=resume, overwrite=overwrite, warn=warn)
    except OutputWriteError:
        with contextlib.suppress(OSError):  # the same failure again: the first one tells
            f.close()
        raise
    finally:
        f.close()


def _lock(f: IO[str], path: Path) -> None:
    """Lock the open output for this job, or refuse it when another job holds it; a file
    system without locks goes on unlocked.

    Raises:
        UsageError: another job holds the lock (the message names the file).
    """
    try:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            _lock_windows(f.fileno())
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK):
            raise UsageError(
                f"output {path} is locked: another job is writing it (wait for it to "
                "end, or write to another file with -o)"
            ) from None
        # any other error: a file system without locks, go on unlocked


def _lock_windows(fd: int) -> None:
    """``msvcrt.locking`` of the byte at :data:`WINDOWS_LOCK_OFFSET` (it locks from the
    file position); the position goes back to the end, where the output is appended.
    The lock ends when the file is closed."""
    os.lseek(fd, WINDOWS_LOCK_OFFSET, os.SEEK_SET)
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    finally:
        os.lseek(fd, 0, os.SEEK_END)


def _prepare(
    f: IO[str], path: Path, *, resume: bool, overwrite: bool, warn: Callable[[str], None]
) -> Output:
    info = os.fstat(f.fileno())
    is_regular = stat.S_ISREG(info.st_mode)
    out = Output(f, str(path), is_file=True, path=path if is_regular else None, _fsync=is_regular)
    if not is_regular or info.st_size == 0:
        return out
    if overwrite:
        os.ftruncate(f.fileno(), 0)
        return out
    if not resume:
        raise UsageError(
            f"output {path} already exists and is not empty "
            f"({info.st_size} bytes): add --resume to continue the job it holds (the same "
            "input and options), --overwrite to replace it, or write to another file "
            "(-o) if it is another job's output"
        )
    try:
        with open(path, "rb") as existing:
            scan = scan_output(existing, str(path))
    except OutputCorrupt as exc:
        raise UsageError(str(exc)) from None
    if scan.is_cut:
        os.ftruncate(f.fileno(), scan.good_size)
        os.fsync(f.fileno())
        warn(
            f"{path}: removed its cut-off last line ({scan.cut_bytes} bytes without a "
            "newline, left by a job that was killed or could not finish writing, e.g. on a "
            "full disk); that item will be done again"
        )
    out.done, out.ids, out.n_existing = scan.done, scan.ids, scan.n_lines
    out.errors, out.formats = scan.errors, scan.formats
    return out
