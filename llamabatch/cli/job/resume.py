"""Resuming a job: which ids an existing output file holds (whole lines; a line cut off
by a killed job is truncated before appending), ids compared as JSON values
(:func:`~.input.id_key`: ``7`` and ``"7"`` differ), and the input's fingerprint kept
beside it (``OUT.fingerprint``: per id its line and digest, and the job's options that
shape a reply), with which ``--resume`` refuses an input whose line of an id already
written changed, an ``OUT`` of another input, or options that changed
(:func:`changed_options`); an error line whose input line changed since is done again
(:class:`ResumePlan`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ...params import SamplingParams
from ..errors import OutputCorrupt, UsageError
from .input import Line, id_key

#: Appended to the output's name: the file of its input's fingerprint.
FINGERPRINT_SUFFIX = ".fingerprint"


@dataclass(frozen=True, slots=True)
class OutputScan:
    """What an existing output file holds.

    Attributes:
        done: :func:`id_key` of the id of every whole line.
        ids: the same, in the file's order.
        n_lines: whole (newline-terminated) non-blank lines.
        good_size: bytes up to the end of the last whole line.
        cut_bytes: bytes after it: a line cut off part-way (0 when the file ends with a
            newline).
        errors: :func:`id_key` of the ids of its error lines (an item that got no reply).
        formats: the ``--output-format`` of its lines (:func:`line_format`).
    """

    done: frozenset[str]
    n_lines: int
    good_size: int
    cut_bytes: int
    ids: tuple[str, ...] = ()
    errors: frozenset[str] = frozenset()
    formats: frozenset[str] = frozenset()

    @property
    def is_cut(self) -> bool:
        """True when the file ends with a line cut off part-way."""
        return self.cut_bytes > 0


def line_format(record: Mapping[str, Any]) -> str:
    """The ``--output-format`` an output line was written in: ``"openai"`` for a Batch API
    response line (it has ``custom_id``), else ``"llamabatch"``."""
    return "openai" if "custom_id" in record else "llamabatch"


def line_key(record: Mapping[str, Any]) -> str:
    """:func:`id_key` of the item of an output line: its ``id``, or a Batch API response
    line's ``custom_id`` (its ``id`` is the line's)."""
    return id_key(record["custom_id"] if "custom_id" in record else record["id"])


def is_error_line(record: Mapping[str, Any]) -> bool:
    """True for the output line of an item that got no reply: ``finish_reason``
    ``"error"``, or a Batch API line whose ``error`` is set."""
    if line_format(record) == "openai":
        return record.get("error") is not None
    return record.get("finish_reason") == "error"


def scan_output(f: BinaryIO, name: str = "output") -> OutputScan:
    """Read an existing output file from its start (``f`` opened in binary mode).

    Every newline-terminated line must be blank or a JSON object with an ``"id"`` (the
    item's, or for an OpenAI batch response line, whose item is its ``"custom_id"``); the
    bytes after the last newline, if any, are a cut-off line, whatever they hold.

    Raises:
        OutputCorrupt: a whole line is not a JSON object with an ``"id"`` (named by its
            line number): the file was not written by ``llamabatch complete`` or was
            edited, so it is left alone.
    """
    ids: list[str] = []
    errors: set[str] = set()
    formats: set[str] = set()
    n_lines = good_size = cut_bytes = 0
    for number, raw in enumerate(f, start=1):
        if not raw.endswith(b"\n"):
            cut_bytes = len(raw)
            break
        good_size += len(raw)
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:  # UnicodeDecodeError included
            raise OutputCorrupt(
                f"{name}:{number}: line {number} of the existing output is "
                f"not valid JSON ({exc}); cannot resume from it"
            ) from None
        if not isinstance(obj, dict) or "id" not in obj:
            raise OutputCorrupt(
                f"{name}:{number}: line {number} of the existing output is "
                'not a JSON object with an "id"; cannot resume from it'
            )
        ids.append(line_key(obj))
        formats.add(line_format(obj))
        if is_error_line(obj):
            errors.add(ids[-1])
        n_lines += 1
    return OutputScan(
        frozenset(ids),
        n_lines,
        good_size,
        cut_bytes,
        tuple(ids),
        frozenset(errors),
        frozenset(formats),
    )


# -- the input's fingerprint ---------------------------------------------------------------
def fingerprint_path(out: Path) -> Path:
    """Where the fingerprint of the input of output ``out`` is kept: ``OUT.fingerprint``."""
    return out.with_name(out.name + FINGERPRINT_SUFFIX)


def read_fingerprint(out: Path) -> dict[str, tuple[int, str]] | None:
    """The fingerprint kept for ``out``: id key -> (input line, digest), or ``None``."""
    doc = _fingerprint_doc(out)
    try:
        return {str(k): (int(v[0]), str(v[1])) for k, v in doc["lines"].items()}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def read_options(out: Path) -> dict[str, Any] | None:
    """The options kept in ``out``'s fingerprint (:func:`write_fingerprint`), or ``None``
    (no fingerprint, or one written before options were kept)."""
    options = _fingerprint_doc(out).get("options")
    return options if isinstance(options, dict) else None


def _fingerprint_doc(out: Path) -> dict[str, Any]:
    try:
        doc = json.loads(fingerprint_path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def as_json(value: object) -> Any:
    """``value`` as the JSON value it is kept as (tuples as lists, keys sorted)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def changed_options(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"name: old -> new"`` for each option whose kept value differs (both as JSON); a
    sampling field that ``old`` lacks (kept by a llamabatch before the field existed)
    counts as its default."""
    new = as_json(new)
    defaults = as_json(dataclasses.asdict(SamplingParams()))

    def before(name: str) -> Any:
        return old[name] if name in old else defaults.get(name)

    return [
        f"{name}: {json.dumps(before(name))} -> {json.dumps(new.get(name))}"
        for name in sorted(set(old) | set(new))
        if before(name) != new.get(name)
    ]


def write_fingerprint(
    out: Path,
    prompts: Path,
    entries: Iterable[Line],
    kept: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Keep the fingerprint of ``entries`` (and the ``kept`` ones of other inputs' ids)
    and the job's ``options`` beside ``out``, written whole (a temporary file renamed).

    Raises:
        OSError: it cannot be written.
    """
    lines = dict(kept or {})
    lines.update({id_key(e.id): (e.line, e.digest) for e in entries})
    path = fingerprint_path(out)
    tmp = path.with_name(path.name + ".tmp")
    doc = {"input": str(prompts), "options": as_json(dict(options or {})), "lines": lines}
    tmp.write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What ``--resume`` does with an existing output (:func:`check_resume`).

    Attributes:
        kept: the fingerprint entries of the ids in the output that the input does not
            have (kept with ``--keep-other-ids``), for :func:`write_fingerprint`.
        redo: :func:`id_key` of its error lines whose input line changed since they were
            written (a line the user fixed): they are removed from the output and their
            items done again.
    """

    kept: dict[str, tuple[int, str]]
    redo: frozenset[str] = frozenset()


def check_resume(
    out: Path,
    scan_ids: tuple[str, ...],
    prompts: Path,
    entries: Sequence[Line],
    *,
    errors: frozenset[str] = frozenset(),
    options: Mapping[str, Any] | None = None,
    allow_changed_options: bool = False,
    keep_other_ids: bool = False,
    warn: Callable[[str], None] = lambda message: None,
) -> ResumePlan:
    """Check that an output holding ``scan_ids`` (:attr:`OutputScan.ids`; ``errors``: those
    of its error lines) may be resumed with the input ``entries`` read from ``prompts``.

    An error line whose input line changed since (by the fingerprint: its digest, or a
    line whose error line took its line number as id now has its own id) is to be done
    again (:attr:`ResumePlan.redo`); any other changed line is refused.

    Raises:
        UsageError: the output holds ids the input does not have (unless
            ``keep_other_ids``); a line of an id already in the output changed since
            it was written and its output line is a reply (the first such line is
            named); or ``options`` differ from those it was written with (each named,
            unless ``allow_changed_options``).
    """
    digests = {id_key(e.id): e.digest for e in entries}
    fingerprint = read_fingerprint(out)
    redo = frozenset(_fixed_errors(set(scan_ids) & errors, digests, fingerprint or {}))
    other = [k for k in scan_ids if k not in digests and k not in redo]
    if other and not keep_other_ids:
        raise UsageError(
            f"{out} holds {len(set(other))} ids that are not in {prompts} (the first: "
            f"{other[0]}): it was written from another input. Resume it with the input "
            "it was written from, give --overwrite to start over, or --keep-other-ids to "
            "keep those lines and append this input's items after them"
        )
    _check_options(out, scan_ids, options, allow_changed_options, warn)
    if fingerprint is None:
        if scan_ids:
            warn(
                f"{out} has no fingerprint of its input ({fingerprint_path(out).name}, "
                f"written from this version on): cannot check that {prompts} did not "
                "change since"
            )
        return ResumePlan({})
    done = set(scan_ids) - redo
    for e in entries:
        key = id_key(e.id)
        was = fingerprint.get(key)
        if key in done and was is not None and was[1] != e.digest:
            moved = f", then line {was[0]}" if was[0] != e.line else ""
            raise UsageError(
                f"{prompts}:{e.line}: line {e.line} (id {key}{moved}) changed since "
                f"{out} was written, which holds its reply to the line as it was: put "
                f"the line back, remove id {key} from {out} to do it again, or give "
                "--overwrite to start over"
            )
    kept = {k: v for k, v in fingerprint.items() if k in done and k not in digests}
    return ResumePlan(kept, redo)


def _fixed_errors(
    errors: set[str], digests: Mapping[str, str], fingerprint: Mapping[str, tuple[int, str]]
) -> Iterator[str]:
    """The error lines' keys whose input line changed since: its digest differs, or the
    id was its line number and the input no longer has it (the fixed line has its own)."""
    for key in errors:
        was = fingerprint.get(key)
        if was is None:
            continue
        if key in digests:
            if digests[key] != was[1]:
                yield key
        elif key == id_key(was[0]):
            yield key


def _check_options(
    out: Path,
    scan_ids: Sequence[str],
    options: Mapping[str, Any] | None,
    allow: bool,
    warn: Callable[[str], None],
) -> None:
    if options is None or not scan_ids:
        return
    old = read_options(out)
    if old is None:
        warn(
            f"{out} has no record of the options it was written with (its fingerprint "
            "is older or missing): cannot check that they did not change"
        )
        return
    changed = changed_options(old, options)
    if not changed:
        return
    what = "; ".join(changed)
    if allow:
        warn(f"{out} was written with other options, kept as they are ({what})")
        return
    raise UsageError(
        f"{out} was written with other options than these ({what}): its "
        f"{len(scan_ids)} replies would not match the rest. Run with the options it was "
        "written with, give --overwrite to start over, write to another file (-o), or "
        "--allow-changed-options to keep its replies and append the rest with these"
    )
