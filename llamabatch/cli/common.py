"""What every subcommand of the ``llamabatch`` command shares: exit statuses, the usage
error, the parser class, and :func:`guarded`, which maps a subcommand's errors to exit
statuses.

Exit statuses: 0 done (items that failed are reported per item in the output, not by the
status), 1 a runtime failure (e.g. the default model could not be fetched), 2 bad usage or
bad input (one line on stderr, no traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from ..errors import LlamaBatchError, ModelFetchError, ModelFileError, ParameterError
from .errors import UsageError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Each subcommand's line in ``llamabatch --help`` (its module's parser takes it from here,
#: so the top-level help can list a subcommand whose module cannot be imported).
SUMMARIES = {
    "complete": "complete every prompt of a JSONL or text file",
    "bench": "measure tokens/s per slot count and a tagging workload",
    "tune": "measure which --slots pays on this machine, model and prompts",
    "eval": "run lm-evaluation-harness tasks on a GGUF model (needs the eval extra)",
    "doctor": "check that llama-cpp-python, llama.cpp and the model work on this machine",
}

#: Added to the CLI's model errors: the command that checks the model and llama.cpp.
DOCTOR_HINT = "`llamabatch doctor --model GGUF` checks a model and llama.cpp on this machine"


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors raise :class:`UsageError`.

    argparse would print the usage and exit; the command prints one line instead.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def usage_error(exc: Exception, args: argparse.Namespace) -> UsageError:
    """``exc`` (a bad value) as a :class:`UsageError`; a
    :class:`~llamabatch.errors.ParameterError` of a parameter that a flag of ``args``
    sets is told in the flag's terms: ``--slots 0 is out of range: valid is ...``."""
    if isinstance(exc, ParameterError) and hasattr(args, exc.name):
        flag = "--" + exc.name.replace("_", "-")
        return UsageError(f"{flag} {exc.value} is out of range: valid is {exc.valid}")
    return UsageError(str(exc))


def note(args: argparse.Namespace, message: str) -> None:
    """Print ``llamabatch: message`` on stderr, unless ``--quiet``."""
    if not args.quiet:
        print(f"llamabatch: {message}", file=sys.stderr, flush=True)


def warner(prog: str) -> Callable[[str], None]:
    """``warn(message)``: print ``prog: warning: message`` on stderr."""
    return lambda message: print(f"{prog}: warning: {message}", file=sys.stderr, flush=True)


def error_line(prog: str, message: object) -> None:
    """Print ``prog: error: message`` as one line on stderr."""
    text = " ".join(str(message).split())
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


def guarded(
    prog: str, work: Callable[[argparse.Namespace], int], args: argparse.Namespace, interrupted: str
) -> int:
    """Run a subcommand's ``work(args)``; turn its expected errors into exit statuses.

    Bad usage or a bad model file → one line on stderr and 2 (a model error adds
    :data:`DOCTOR_HINT`); a runtime failure (model
    fetch, llama.cpp, I/O) → one line and 1; Ctrl-C → ``interrupted`` and 130.
    """
    try:
        return work(args)
    except ModelFileError as exc:
        error_line(prog, f"{exc} ({DOCTOR_HINT})")
        return EXIT_USAGE
    except UsageError as exc:
        error_line(prog, exc)
        return EXIT_USAGE
    except (ModelFetchError, LlamaBatchError, OSError) as exc:
        error_line(prog, exc)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        error_line(prog, interrupted)
        return EXIT_INTERRUPTED
