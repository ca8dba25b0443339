"""``llamabatch eval``: lm-evaluation-harness tasks on a GGUF model through llamabatch.

Runs ``lm_eval.simple_evaluate`` with the ``llamabatch`` model (one prefill per shared
context) and prints the harness's results table. Needs the eval extra: pip install
'llamabatch[eval]'. Tasks of your own: YAML files in --include-path DIR (local data:
set HF_DATASETS_OFFLINE=1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import LibraryError
from . import options
from .common import SUMMARIES, UsageError, guarded
from .llm import model_path

PROG = "llamabatch eval"

#: How to get what ``llamabatch eval`` needs.
INSTALL_HINT = "pip install 'llamabatch[eval]'"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``eval`` subcommand to the ``llamabatch`` parser."""
    p = options.subcommand(subparsers, PROG, SUMMARIES["eval"], __doc__)
    p.add_argument(
        "--tasks",
        required=True,
        metavar="NAMES",
        help="comma-separated task names or glob patterns (the harness's tasks, groups and "
        "tags, or those of --include-path)",
    )
    p.add_argument(
        "--include-path",
        type=Path,
        default=None,
        metavar="DIR",
        help="a folder of task YAML files of your own (default: none)",
    )
    p.add_argument(
        "--num-fewshot",
        type=int,
        default=None,
        metavar="N",
        help="examples in each task's few-shot context (default: the task's)",
    )
    p.add_argument(
        "--limit",
        type=float,
        default=None,
        metavar="N",
        help="documents per task: a count, or a fraction below 1 (default: all)",
    )
    p.add_argument(
        "--slots",
        type=int,
        default=4,
        metavar="N",
        help="sequences decoded together (default: %(default)s)",
    )
    p.add_argument(
        "--n-ctx",
        type=int,
        default=4096,
        metavar="N",
        help="tokens of the model's context; each slot holds min(4096, N) (default: %(default)s)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the harness's results as JSON to FILE (default: none)",
    )
    options.add(p, "--threads", help="CPU threads (default: llama-cpp-python's)")
    options.add(p, "--n-gpu-layers")
    options.add(p, "--quiet", help="no progress bars or notes on stderr (default: off)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``llamabatch eval``; return the exit status (0, 1, 2 or 130)."""
    return guarded(PROG, _work, args, "interrupted: no results")


def _work(args: argparse.Namespace) -> int:
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
        from lm_eval.utils import make_table

        from ..lm_eval import LlamaBatchLM
    except ImportError as exc:
        raise LibraryError(
            f"llamabatch eval needs lm-evaluation-harness: {INSTALL_HINT} ({exc})"
        ) from None
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise UsageError("--tasks names no task: give comma-separated task names")
    if args.include_path is not None and not args.include_path.is_dir():
        raise UsageError(f"--include-path {args.include_path} is not a folder")
    try:
        options.check_threads(args.threads)
        manager = TaskManager(
            include_path=None if args.include_path is None else str(args.include_path)
        )
        missing = [t for t in tasks if not manager.match_tasks([t])]
        if missing:
            raise ValueError(
                f"--tasks: no task named {', '.join(missing)} (the harness's tasks, or "
                "YAML files in --include-path)"
            )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    path = model_path(args.model, quiet=args.quiet, note=lambda m: _note(args, m))
    with LlamaBatchLM(
        str(path),
        slots=args.slots,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        quiet=args.quiet,
    ) as lm:
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=tasks,
            num_fewshot=args.num_fewshot,
            limit=_limit(args.limit),
            task_manager=manager,
            log_samples=False,
            verbosity="ERROR" if args.quiet else None,
        )
    if results is None:  # only on a non-zero rank of a distributed run
        return 0
    print(make_table(results))
    if args.output is not None:
        args.output.write_text(json.dumps(results, indent=2, default=str) + "\n")
        _note(args, f"results written to {args.output}")
    return 0


def _limit(value: float | None) -> int | float | None:
    """``--limit``: a count as an int, a fraction as a float."""
    if value is None or value < 1:
        return value
    return int(value)


def _note(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(f"llamabatch: {message}", file=sys.stderr, flush=True)
