"""``llamabatch bench``: tokens/s per slot count, and a tagging workload one at a time vs batched.

Prints on standard output a header naming the device, model and versions, then two
tables (a progress bar runs on stderr):

1. raw throughput per B, in llama.cpp's ``llama-batched-bench`` columns: B random
   prompts of PP tokens prefilled together (T_PP, S_PP), then TG lockstep steps of one
   greedy token per sequence (T_TG, S_TG), through llamabatch's batch context;
2. a tagging workload (default S: a ~390-token system prompt shared by every item and a
   50-150 token ticket; U: unique prompts; L: lists of 1-12 items; tagging: prompts of
   varied length around PP), fresh prompts every round, natural stops, as seconds per
   item one at a time and through the slot engine with each B, in alternating rounds;
   the ratio is s/item batched over s/item one at a time (``Llama.create_completion``
   in a loop, which keeps the previous prompt's cache) in the same round (below 1:
   batching wins). Both parts drive the same engine as BatchGenerator.

With --prompts FILE the workload's items are the user's own instead: FILE is read as
llamabatch complete and llamabatch tune read it (JSONL with prompt or messages and
per-line fields such as choices, json_schema, max_tokens, temperature; OpenAI batch
requests; text lines, wrapped as --system, --template and --raw say), each round takes
--items fresh items disjoint from every other round's (sampled with --seed, as tune
samples them with --items-seed; a file too small for disjoint rounds is refused, as
tune refuses it), and each item keeps its own sampling and constraint on both paths
(base: --temperature, default 0.1; items without a seed get seed 0).

With --json OUT, everything also goes to a JSON file (schema: ``llamabatch.bench``).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..measure.bench import PARTS, PROMPTS_WORKLOAD, SPREAD, BenchParams, bench, llama_setup
from ..measure.host import cpu_count
from ..measure.workloads import WORKLOADS
from ..params import DEFAULT_TEMPERATURE, SamplingParams
from . import options
from .common import EXIT_OK, SUMMARIES, UsageError, guarded, usage_error, warner
from .complete import add_format_option, add_text_line_options
from .job.items import read_items
from .llm import loaded_llama, model_path

PROG = "llamabatch bench"
PROMPTS_ONLY = ("--format", "--system", "--template", "--raw", "--temperature", "--n-ctx-seq")


def _slots(text: str) -> tuple[int, ...]:
    return options.slot_counts(text, 1)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bench`` subcommand to the ``llamabatch`` parser."""
    d = BenchParams()
    p = options.subcommand(subparsers, PROG, SUMMARIES["bench"], __doc__)
    p.add_argument(
        "--slots",
        type=_slots,
        default=d.slots,
        metavar="B,B,...",
        help="slot counts to measure (default: 1,2,4,8)",
    )
    defaults = {**asdict(d), "items": None}  # None: 8, or as tune with --prompts
    options.add_fields(
        p,
        defaults,
        [
            (
                "prompt_tokens",
                int,
                "PP",
                "prompt tokens per sequence; workload prompts vary "
                f"within +-{round(SPREAD * 100)}%% of it",
            ),
            ("gen_tokens", int, "TG", "generated tokens per sequence in the raw bench"),
            ("rounds", int, "N", "raw bench measurements per B, median reported"),
            (
                "items",
                int,
                "N",
                "workload items per round (default: 8; with --prompts "
                "min(8, prompts // workload rounds))",
            ),
            ("workload_rounds", int, "N", "workload rounds, each runs one at a time then every B"),
            (
                "max_tokens",
                int,
                "N",
                "most reply tokens per workload item (default: the "
                "workload's: 48 for S and U, 200 for L, 64 for tagging; with "
                "--prompts 200, as complete and tune, unless a line sets max_tokens)",
            ),
        ],
    )
    p.add_argument(
        "--workload",
        choices=(*WORKLOADS, "tagging"),
        default=None,
        help=f"the tagging workload (default: {d.workload}, a shared system prompt)",
    )
    p.add_argument(
        "--prompts",
        metavar="FILE",
        type=Path,
        default=None,
        help="the workload's items come from FILE, read as llamabatch complete and tune "
        "read it (JSONL with prompt or messages and per-line fields, OpenAI batch "
        "requests, or text lines; - reads standard input), --items fresh disjoint items "
        "per round, instead of --workload (default: none)",
    )
    add_format_option(p, default=None)
    add_text_line_options(p)
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        metavar="T",
        help="with --prompts: the temperature of items whose line sets none, >= 0 "
        f"(default: {DEFAULT_TEMPERATURE}, as complete and tune; the other workloads "
        "are greedy)",
    )
    p.add_argument(
        "--n-ctx-seq",
        type=int,
        default=None,
        metavar="N",
        help="with --prompts: tokens of context per sequence, prompt + reply, of one at "
        "a time (the Llama's n_ctx) and of each slot, as in tune; llama.cpp rounds both "
        "up to a multiple of 256; without --only workload the Llama also holds the raw "
        f"bench's PP + TG (default: {d.n_ctx_seq}, as complete and tune; the other "
        "workloads size it to their prompts)",
    )
    options.add_fields(
        p,
        defaults,
        [
            ("n_batch", int, "N", "most tokens per llama_decode"),
            (
                "seed",
                int,
                "N",
                "seed of the random prompts and the workload; with --prompts, of the "
                "sample of items (tune's --items-seed)",
            ),
        ],
    )
    p.add_argument(
        "--only", choices=PARTS, default=None, help="run only the raw bench or only the workload"
    )
    options.add(
        p,
        "--threads",
        help="CPU threads for prompts and generation (default: every CPU this process may use)",
    )
    options.add(p, "--n-gpu-layers")
    p.add_argument(
        "--json",
        metavar="OUT",
        type=Path,
        default=None,
        help="also write everything to this JSON file",
    )
    options.add(p, "--quiet", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``llamabatch bench``; return the exit status (0, 1, 2 or 130)."""
    return guarded(PROG, _run, args, "interrupted")


def _check_prompts_options(args: argparse.Namespace) -> None:
    if args.prompts is None:
        values = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in PROMPTS_ONLY}
        given = [flag for flag, v in values.items() if v is not None and v is not False]
        if given:
            raise UsageError(
                f"{given[0]} applies to the items of --prompts FILE only (the synthetic "
                "workloads are greedy, their contexts sized to their prompts): give "
                f"--prompts FILE or drop {given[0]}"
            )
        return
    if args.workload is not None:
        raise UsageError(
            f"--prompts {args.prompts} and --workload {args.workload} are both given: "
            "--prompts takes the workload's items from FILE instead of a synthetic "
            "workload; give one of them"
        )
    if args.only == "raw":
        raise UsageError(
            f"--prompts {args.prompts} gives the workload's items, but --only raw skips "
            "the workload: drop one of them"
        )


def _run(args: argparse.Namespace) -> int:
    _check_prompts_options(args)
    read = None
    items = 8 if args.items is None else args.items
    try:
        options.check_threads(args.threads)
        if args.prompts is not None:
            t = DEFAULT_TEMPERATURE if args.temperature is None else args.temperature
            read = read_items(
                args.prompts,
                args.format or "auto",
                SamplingParams(temperature=t),
                system=args.system,
                template=args.template,
                raw=args.raw,
                warn=warner(PROG),
                command="bench",
            )
            items = options.items_per_round(len(read.items), args, "--workload-rounds")
        fixed: dict[str, Any] = dict(
            items=items,
            parts=PARTS if args.only is None else (args.only,),
            workload=PROMPTS_WORKLOAD if read is not None else (args.workload or "S"),
            prompts=None if args.prompts is None else str(args.prompts),
        )
        given = {  # the options named as the fields, where given
            f.name: v
            for f in dataclasses.fields(BenchParams)
            if f.name not in fixed and (v := getattr(args, f.name, None)) is not None
        }
        params = BenchParams(**given, **fixed)
        options.check_output_file("--json", args.json)
    except ValueError as exc:
        raise usage_error(exc, args) from None
    path = model_path(args.model, quiet=args.quiet)
    threads = args.threads if args.threads is not None else cpu_count()
    with loaded_llama(
        path, n_ctx=params.llama_n_ctx, n_threads=threads, n_gpu_layers=args.n_gpu_layers
    ) as llm:
        file_items = None if read is None else read.work_items(llm)
        try:
            setup = llama_setup(llm, path, params, threads=threads, n_gpu_layers=args.n_gpu_layers)
            bench(setup, params, json_path=args.json, quiet=args.quiet, items=file_items)
        except ValueError as exc:  # sizes that do not fit the context, too many slots
            raise usage_error(exc, args) from None
    return EXIT_OK
