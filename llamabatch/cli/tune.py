"""``llamabatch tune``: on this machine, model and items, which --slots pays, and do
the replies still agree.

Rounds of fresh items sampled from PROMPTS (disjoint: no path replays a cached prompt)
are completed one at a time (Llama.create_completion, or create_chat_completion for a
chat: the tagger's loop without llamabatch) and by the slot engine at each --slots
count, in an order that alternates from round to round; at temperature > 0 a second
one-at-a-time run with other seeds gives the floor (how well two one-at-a-time runs
agree). PROMPTS, its per-line fields and the sampling, constraint and context options
are those of llamabatch complete; items without a seed get seed 0 (the floor: 1), so
that every setting draws alike.

Prints per setting s/item (median, min-max over rounds), CPU s/item, the ratio to one at
a time paired within each round with its 95 % interval, items per hour, the ETA for all
of PROMPTS, KV MiB per slot and in all, and the share of replies (and labels: --choices,
--json-schema fields, --label-regex) equal to one at a time's (at temperature > 0: to the
run of the other seed, as the floor); then warnings about a busy CPU or rounds that
disagree, the verdict (use --slots K, batching does not pay, or cannot tell: why and what
would tell) and the llamabatch complete command to run. The run takes rounds x items x
(slot counts + 1, + 2 at temperature > 0) completions, whatever the size of PROMPTS;
--budget adds rounds of fresh items while it cannot tell.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..measure.report import write_json
from ..measure.tune import TUNE_SLOTS
from ..measure.verdict import DEFAULT_MAX_AGREEMENT_DROP, DEFAULT_MIN_GAIN_PCT
from ..params import AUTO_SLOTS
from . import options
from .common import (
    EXIT_OK,
    SUMMARIES,
    ArgumentParser,
    UsageError,
    guarded,
    note,
    usage_error,
    warner,
)
from .complete import add_item_options, sampling_params
from .job.items import read_items
from .job.report import progress_bar
from .llm import loaded_llama, model_path

PROG = "llamabatch tune"
_warn = warner(PROG)
DEFAULT_ROUNDS = 3


def slot_list(text: str) -> tuple[int, ...] | str:
    """``"2,4"`` -> ``(2, 4)`` (an argparse ``type``): the engine's slot counts, each >= 2,
    duplicates dropped; ``"auto"`` as it is (:func:`llamabatch.measure.tune.auto_slot_counts`).

    Raises:
        argparse.ArgumentTypeError: not a comma-separated list of integers >= 2.
    """
    if text.strip().lower() == AUTO_SLOTS:
        return AUTO_SLOTS
    values = options.slot_counts(text, 2, " (one at a time is always measured)")
    return tuple(dict.fromkeys(values))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``tune`` subcommand to the ``llamabatch`` parser."""
    p = options.subcommand(subparsers, PROG, SUMMARIES["tune"], __doc__)
    p.add_argument(
        "prompts",
        metavar="PROMPTS",
        type=Path,
        help="input file, as for llamabatch complete (JSONL or text; - reads standard input)",
    )
    p.add_argument(
        "--slots",
        type=slot_list,
        default=TUNE_SLOTS,
        metavar="2,4,8",
        help="slot counts of the engine to try, comma-separated, each >= 2, or auto: 2, 4, 8 "
        "below the most whose KV cache fits half the free memory of the GPU (of the host on "
        "a CPU build), then that count (default: 2,4,8)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        metavar="N",
        help="rounds, each of fresh items (default: %(default)s)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after --rounds, go on with rounds of fresh items while it cannot tell, as "
        "long as the next round ends within SECONDS of the start (default: exactly --rounds)",
    )
    p.add_argument(
        "--items",
        type=int,
        default=None,
        metavar="N",
        help="items per round; rounds x items must not exceed the prompts "
        "(default: min(8, prompts // rounds))",
    )
    p.add_argument(
        "--items-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the random sample of items (default: %(default)s)",
    )
    p.add_argument(
        "--label-regex",
        metavar="RE",
        default=None,
        help="a reply's label is the first match of RE (group 1 if it has one) "
        "(default: the reply with --choices, its JSON value with --json-schema)",
    )
    p.add_argument(
        "--min-gain",
        type=float,
        default=DEFAULT_MIN_GAIN_PCT,
        metavar="PCT",
        help="percent less time per item a setting must save (default: %(default)g)",
    )
    p.add_argument(
        "--max-agreement-drop",
        type=float,
        default=DEFAULT_MAX_AGREEMENT_DROP,
        metavar="POINTS",
        help="points of agreement a setting may lose against the floor (default: %(default)g)",
    )
    p.add_argument(
        "--json",
        metavar="OUT",
        type=Path,
        default=None,
        help="write the report with every round and every reply to OUT (default: none)",
    )
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        type=Path,
        default=None,
        help="draw s/item and agreement by slot count into OUT.png; needs matplotlib: "
        "pip install 'llamabatch[plot]' (default: none)",
    )
    add_item_options(p)
    options.add(p, "--threads", help="CPU threads (default: llama-cpp-python's)")
    options.add(p, "--n-gpu-layers")
    options.add(p, "--quiet", help="no progress bar or notes on stderr (default: off)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``llamabatch tune``; return the exit status (0, 1, 2 or 130)."""
    return guarded(PROG, _run, args, "interrupted: no report was written")


def complete_args(args: argparse.Namespace) -> list[str]:
    """The arguments of ``llamabatch complete`` that reproduce this run's items and
    sampling: PROMPTS, then every item option that differs from its default."""
    blank = ArgumentParser(add_help=False)
    add_item_options(blank)
    defaults = vars(blank.parse_args([]))
    out = [str(args.prompts)]
    if args.model is not None:
        out += ["--model", str(args.model)]
    for dest, default in defaults.items():
        value = getattr(args, dest)
        if value == default:
            continue
        flag = "--" + dest.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    for flag, value, default in (
        ("--threads", args.threads, None),
        ("--n-gpu-layers", args.n_gpu_layers, -1),
    ):
        if value != default:
            out += [flag, str(value)]
    return out


def _check_plot_available() -> None:
    from ..measure.plot import PlotUnavailable, pyplot

    try:
        pyplot()
    except PlotUnavailable as exc:
        raise UsageError(f"--plot: {exc}") from None


def _check_one_reply_flags(args: argparse.Namespace) -> None:
    """--n and --score-choices (complete's) would make every item ask for more than the
    one reply a create_completion call gives: refused, as such a line is."""
    for flag, given in (("--n", args.n != 1), ("--score-choices", args.score_choices)):
        if given:
            raise UsageError(
                f"{flag}: tune compares one generated reply per item with one "
                f"Llama.create_completion call per item, which gives one reply: drop {flag}"
            )


def _run(args: argparse.Namespace) -> int:
    from ..measure.tune import tune

    if args.plot is not None:
        _check_plot_available()  # before minutes of work, not after
    _check_one_reply_flags(args)
    try:
        options.check_output_file("--json", args.json)
        options.check_output_file("--plot", args.plot)
        base = sampling_params(args)
        options.check_threads(args.threads)
        if args.budget is not None and not args.budget > 0:
            raise ValueError(f"--budget {args.budget:g} is out of range: valid is seconds > 0")
    except ValueError as exc:
        raise usage_error(exc, args) from None
    read = read_items(
        args.prompts,
        args.format,
        base,
        system=args.system,
        template=args.template,
        raw=args.raw,
        warn=_warn,
    )
    samplings = read.samplings
    per_round = options.items_per_round(len(read.items), args, "--rounds")
    n_slots = 3 if args.slots == AUTO_SLOTS else len(args.slots)  # auto: at most 3 counts
    n_runs = 1 + n_slots + any(not s.is_greedy for s in samplings)
    path = model_path(args.model, quiet=args.quiet, note=lambda m: note(args, m))
    with loaded_llama(
        path, n_ctx=args.n_ctx_seq, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers
    ) as llm:
        work = read.work_items(llm)
        bar = progress_bar(args.rounds * per_round * n_runs, args.quiet, desc="tune")
        try:
            report = tune(
                llm,
                [it.prompt for it in work],
                args.slots,
                args.rounds,
                items=args.items,
                sampling=samplings,
                max_tokens=args.max_tokens,
                n_ctx_seq=args.n_ctx_seq,
                n_batch=args.n_batch,
                label_regex=args.label_regex,
                ids=[it.id for it in work],
                items_seed=args.items_seed,
                min_gain_pct=args.min_gain,
                max_agreement_drop=args.max_agreement_drop,
                complete_args=complete_args(args),
                model=path.name,
                progress=bar.update,
                budget_s=args.budget,
                threads=args.threads,
                threads_as="--threads {}",
            )
        except ValueError as exc:
            raise usage_error(exc, args) from None
        finally:
            bar.close()
    print(report.format(), flush=True)
    if args.json is not None:
        write_json(args.json, report.to_json(), indent=1)
        note(args, f"report with every round and reply written to {args.json}")
    if args.plot is not None:
        from ..measure.plot import plot_report

        plot_report(report, args.plot)
        note(args, f"plot written to {args.plot}")
    return EXIT_OK


__all__ = ["complete_args", "register", "run"]
