"""The ``llamabatch`` command: a thin dispatcher over one module per subcommand.

Each subcommand lives in its own module of this package (``complete.py`` for
``complete``), listed in :data:`SUBCOMMANDS`. A module defines ``register(subparsers)``,
which adds its parser and sets ``func=run`` on it; ``run(args) -> int`` does the work.
What they share (exit statuses, :class:`~llamabatch.cli.common.UsageError`,
:func:`~llamabatch.cli.common.guarded`) is in :mod:`llamabatch.cli.common`, which
imports no subcommand, so there is no import loop.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .._ffi.version import check_version
from .._util.busy import told_by_caller
from ..errors import LibraryError
from . import doctor
from .common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SUMMARIES,
    ArgumentParser,
    UsageError,
    error_line,
)

#: The subcommands that need llama-cpp-python (their modules import the real backend).
NEEDS_LLAMA_CPP = ("complete", "bench", "tune", "eval")

#: Why those cannot run: llama-cpp-python is missing or outside the supported range
#: (``None`` when it is fine). ``--help`` still lists them, saying why and how to install
#: it; ``doctor`` and ``--version`` still work, to say what is installed.
UNAVAILABLE: str | None = None
try:
    check_version()
    from . import bench, complete, tune
    from . import eval as evaluate  # the module of `llamabatch eval`
except LibraryError as exc:
    UNAVAILABLE = str(exc)
    #: Modules that each add one subcommand, in the order they appear in ``--help``.
    SUBCOMMANDS: tuple = (doctor,)
else:
    SUBCOMMANDS = (complete, bench, tune, evaluate, doctor)


def _version() -> str:
    """``llamabatch X (llama-cpp-python Y)``; Y read from the package metadata, so no
    native library is loaded."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    try:
        binding = version("llama-cpp-python")
    except PackageNotFoundError:
        binding = "not installed"
    return f"llamabatch {__version__} (llama-cpp-python {binding})"


def build_parser() -> ArgumentParser:
    """The top-level parser with every subcommand of :data:`SUBCOMMANDS`."""
    epilog = None
    if UNAVAILABLE is not None:
        epilog = (
            f"{', '.join(NEEDS_LLAMA_CPP[:-1])} and {NEEDS_LLAMA_CPP[-1]} need "
            f"llama-cpp-python, which cannot be used here: {UNAVAILABLE}"
        )
    parser = ArgumentParser(
        prog="llamabatch",
        description="Batched completion of many prompts with llama.cpp "
        "(several sequences decoded together on one loaded model).",
        epilog=epilog,
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    if UNAVAILABLE is not None:  # listed, not runnable (main says why)
        for name in NEEDS_LLAMA_CPP:
            subparsers.add_parser(name, help=f"{SUMMARIES[name]} (needs llama-cpp-python)")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llamabatch`` command; return its exit status (see the module doc)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if UNAVAILABLE is not None and argv[:1] and argv[0] in NEEDS_LLAMA_CPP:
        error_line(f"llamabatch {argv[0]}", UNAVAILABLE)
        return EXIT_FAILURE
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        error_line("llamabatch", exc)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    with told_by_caller():  # the commands warn of a busy CPU themselves, naming --threads
        return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
