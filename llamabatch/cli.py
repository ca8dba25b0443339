"""The ``llamabatch`` command: a thin dispatcher over one module per subcommand.

Each subcommand lives in its own module (``cli_complete.py`` for ``complete``), listed in
:data:`SUBCOMMAND_MODULES`. A module defines ``register(subparsers)``, which adds its
parser and sets ``func=run`` on it; ``run(args) -> int`` does the work. Adding ``bench``
means writing ``cli_bench.py`` and adding it to the list.

Exit statuses: 0 done (items that failed are reported per item in the output, not by the
status), 1 a runtime failure (e.g. the default model could not be fetched), 2 bad usage or
bad input (one line on stderr, no traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from .errors import LlamaBatchError

#: Modules that each add one subcommand, in the order they appear in ``--help``.
SUBCOMMAND_MODULES: tuple[str, ...] = ("llamabatch.cli_complete", "llamabatch.cli_bench")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(LlamaBatchError, ValueError):
    """Bad command-line usage or bad input (missing file, malformed line): exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors raise :class:`UsageError`.

    argparse would print the usage and exit; the command prints one line instead.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> ArgumentParser:
    """The top-level parser with every subcommand of :data:`SUBCOMMAND_MODULES`."""
    parser = ArgumentParser(
        prog="llamabatch",
        description="Batched completion of many prompts with llama.cpp "
                    "(several sequences decoded together on one loaded model).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def error_line(prog: str, message: object) -> None:
    """Print ``prog: error: message`` as one line on stderr."""
    text = " ".join(str(message).split())
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


def guarded(prog: str, work: Callable[[argparse.Namespace], int], args: argparse.Namespace,
            interrupted: str) -> int:
    """Run a subcommand's ``work(args)``; turn its expected errors into exit statuses.

    Bad usage or a bad model file → one line on stderr and 2; a runtime failure (model
    fetch, llama.cpp, I/O) → one line and 1; Ctrl-C → ``interrupted`` and 130.
    """
    from .model import ModelFetchError, ModelFileError

    try:
        return work(args)
    except (UsageError, ModelFileError) as exc:
        error_line(prog, exc)
        return EXIT_USAGE
    except (ModelFetchError, LlamaBatchError, OSError) as exc:
        error_line(prog, exc)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        error_line(prog, interrupted)
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llamabatch`` command; return its exit status (see the module doc)."""
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
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
