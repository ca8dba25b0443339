"""``llamabatch complete``: complete every prompt of a file, several at a time.

Input (PROMPTS; - reads standard input):

- JSONL: one JSON object per line with an optional ``id`` (a string or an integer;
  default: the 1-based line number) and either ``prompt`` (a ready string) or
  ``messages`` (a list of {"role": ..., "content": ...}, formatted with the model's own
  chat template from its GGUF metadata, generation prompt appended). Chosen for a
  ``.jsonl`` file, or for any file whose non-blank lines all parse as JSON objects.
  A line may set its own max_tokens, temperature, top_p, top_k, min_p, seed, stop,
  grammar, json_schema, choices, response_format, logprobs, stop_token_ids (every
  field of SamplingParams); they replace the flags for that item, and a line's
  constraint (grammar, json_schema, choices, response_format) replaces the flags'
  (response_format {"type": "text"} lifts it). Any other field is warned about once
  per file.
- OpenAI batch requests: {"custom_id", "method": "POST", "url": "/v1/chat/completions"
  or "/v1/completions", "body": {...}} lines (id = custom_id); write the answers with
  --output-format openai.
- Text: one prompt per line, id = the 1-based line number; each line is the user's
  message of a chat (after --system, through --template), unless --raw.

Blank lines are skipped. Ids must be unique. Every line is checked before any model
work: a malformed line stops the job, named by its line number, or with --skip-bad
becomes an error line in its place (id = the line's own valid id, else its line number).

Output: one JSON object per item, in input order, written, flushed and fsynced after
each group: ``{"id", "text", "finish_reason", "error", "n_prompt_tokens", "n_tokens",
"path"}`` (and ``"logprobs"`` for a line that asks for them), or with --output-format
openai the Batch API's response lines
``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``.
An existing non-empty output file needs --resume (skip the ids it already holds and
append the rest; a cut-off last line left by a killed job is removed) or --overwrite.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from .._util.busy import BUSY_MIN_S, busy_cpu_warning, load_average
from ..completion import Completion
from ..errors import LlamaBatchError
from ..items import item_fields, with_fields
from ..model import DEFAULT_MODEL
from ..params import DEFAULT_N_CTX_SEQ, DEFAULT_TEMPERATURE, BatchConfig, SamplingParams
from ..shapes.requests import CHAT_URL
from ..shapes.responses import batch_error_line, batch_line, custom_id_of, token_text
from . import options
from .common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    SUMMARIES,
    UsageError,
    error_line,
    guarded,
    note,
    usage_error,
    warner,
)
from .errors import OutputWriteError
from .job import runners
from .job.input import (
    FORMATS,
    Line,
    LineItem,
    id_key,
    item_samplings,
    job_items,
    read_prompts,
    with_chat_prompts,
    with_text_template,
)
from .job.output import Output, completion_record, error_record, open_output
from .job.report import JobTally, batching_note, progress_bar, summary_line
from .job.resume import check_resume, write_fingerprint
from .job.signals import Interrupts
from .llm import loaded_llama, model_path, token_text_of_file

PROG = "llamabatch complete"
_warn = warner(PROG)

_SAMPLING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
#: ``BatchConfig``'s defaults, with a number of tokens per sequence (the model is loaded
#: with that context).
BATCH_DEFAULTS = {
    **{f.name: f.default for f in dataclasses.fields(BatchConfig)},
    "n_ctx_seq": DEFAULT_N_CTX_SEQ,
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``complete`` subcommand to the ``llamabatch`` parser."""
    p = subparsers.add_parser(
        "complete",
        help=SUMMARIES["complete"],
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "prompts",
        metavar="PROMPTS",
        type=Path,
        help='input file: JSONL (an object per line with "prompt" or '
        '"messages", and "id"; or OpenAI batch requests) or text '
        "(one prompt per line); - reads standard input",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        type=Path,
        default=None,
        help="output JSONL file; if it exists and is not empty, --resume or "
        "--overwrite is needed (default: standard output)",
    )
    again = p.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue the job in OUT: skip the items whose id is already "
        "in it, append the others (default: off)",
    )
    again.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty OUT (default: off: refuse)"
    )
    p.add_argument(
        "--keep-other-ids",
        action="store_true",
        help="with --resume, keep the lines of OUT whose id is not in PROMPTS and append "
        "the items after them (default: off: such an OUT was written from another input "
        "and is refused)",
    )
    p.add_argument(
        "--allow-changed-options",
        action="store_true",
        help="with --resume, keep the replies OUT holds even though they were written with "
        "other options that shape a reply (sampling, constraint, model, --system, "
        "--template, --raw) and append the rest with these (default: off: refused, "
        "naming each option that changed)",
    )
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="write an error line in place of each malformed input line and "
        "go on (default: off: a malformed line stops the job before any "
        "model work)",
    )
    p.add_argument(
        "--output-format",
        choices=("llamabatch", "openai"),
        default="llamabatch",
        help="output lines: llamabatch's records, or openai: the Batch API's "
        "response lines, keyed by custom_id (default: %(default)s)",
    )
    options.add(p, "--model")
    options.add_fields(
        p,
        BATCH_DEFAULTS,
        [
            (
                "slots",
                options.slots_arg,
                "N",
                "sequences decoded together; 1 = no batching; auto = the most (up to 8) "
                "whose KV cache takes at most half the free memory of the GPU (of the "
                "host on a CPU build)",
            ),
            (
                "lookahead",
                int,
                "N",
                "how far ahead of the oldest unfinished item others may start, a "
                "multiple of --slots (default: the largest multiple of --slots that "
                "is <= max(16, 4 * slots))",
            ),
        ],
    )
    p.add_argument(
        "--page-size",
        type=int,
        default=None,
        metavar="N",
        help="with --server or --ray: most completions per page written together (locally "
        "a page is --slots items) (default: 16)",
    )
    add_item_options(p)
    p.add_argument(
        "--cache-ram-mib",
        type=int,
        default=1024,
        metavar="MIB",
        help="host memory for the states of slots another prompt template "
        "took, loaded back when it returns (as llama-server's --cache-ram); "
        "0 = off (default: %(default)s)",
    )
    options.add(
        p,
        "--threads",
        help="CPU threads (default: llama-cpp-python's: half the cores to generate, "
        "all of them for prompts)",
    )
    options.add(p, "--n-gpu-layers")
    options.add(
        p,
        "--quiet",
        help="no progress bar, summary or notes on stderr; warnings and errors only (default: off)",
    )
    runners.add_options(p)
    p.set_defaults(func=run)


def add_item_options(p: argparse.ArgumentParser) -> None:
    """Add the options that say what each item is and how its reply is made: the input
    format, sampling, reply cap and context, stop strings, the constraint (--choices,
    --json-schema, --grammar) and the text-line template; shared with ``llamabatch tune``
    (read back with :func:`sampling_params`)."""
    add_format_option(p)
    defaults = {**_SAMPLING_DEFAULTS, **BATCH_DEFAULTS, "temperature": DEFAULT_TEMPERATURE}
    options.add_fields(
        p,
        defaults,
        [
            ("max_tokens", int, "N", "most generated tokens per reply"),
            (
                "n_ctx_seq",
                int,
                "N",
                "tokens of context per sequence, prompt + reply; also the "
                "context of the model for items completed alone",
            ),
            ("n_batch", int, "N", "most tokens per llama_decode call"),
            ("temperature", float, "T", "sampling temperature, >= 0; 0 = greedy"),
            ("top_k", int, "K", "keep the K likeliest tokens, 0 = off"),
            ("top_p", float, "P", "nucleus sampling probability mass, in (0, 1]"),
            (
                "min_p",
                float,
                "P",
                "drop tokens below P times the likeliest one's probability, in [0, 1]",
            ),
            (
                "repeat_penalty",
                float,
                "X",
                "penalty factor on tokens among the last "
                f"{defaults['penalty_last_n']} generated, > 0; 1 = off",
            ),
            ("seed", int, "N", "sampling seed, an integer in [0, 2**32 - 2] (default: random)"),
        ],
    )
    p.add_argument(
        "--stop",
        action="append",
        default=None,
        metavar="STR",
        help="end a reply before this string; repeat for several (default: none)",
    )
    p.add_argument(
        "--score-choices",
        action="store_true",
        help="with --choices (or a line's choices), score every label instead of "
        "generating: output lines get choice_probs, text is the likeliest label "
        "(default: off)",
    )
    p.add_argument(
        "--n",
        type=int,
        default=1,
        metavar="K",
        help="replies per prompt, sharing its cache, reply j with seed + j; output lines "
        "get samples (and votes with choices) (default: 1)",
    )
    rule = p.add_mutually_exclusive_group()
    rule.add_argument(
        "--choices",
        metavar="A,B,C",
        default=None,
        help="every reply is exactly one of these comma-separated strings (default: none)",
    )
    rule.add_argument(
        "--json-schema",
        metavar="FILE",
        type=Path,
        default=None,
        help="every reply is JSON valid against the JSON schema in FILE (default: none)",
    )
    rule.add_argument(
        "--grammar",
        metavar="FILE",
        type=Path,
        default=None,
        help="every reply follows the GBNF grammar in FILE, rule root (default: none)",
    )
    add_text_line_options(p)


def add_format_option(p: argparse.ArgumentParser, default: str | None = "auto") -> None:
    """Add ``--format`` (the input format of PROMPTS: one of ``FORMATS``); shared with
    ``llamabatch tune`` and ``llamabatch bench --prompts`` (``default=None`` there: set
    or not)."""
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=default,
        help="input format (default: auto: JSONL for *.jsonl or when every "
        "non-blank line is a JSON object, else text)",
    )


def add_text_line_options(p: argparse.ArgumentParser) -> None:
    """Add ``--system``, ``--template`` and ``--raw``: how a line of a text file becomes
    a prompt; shared with ``llamabatch tune`` and ``llamabatch bench --prompts``."""
    p.add_argument(
        "--system",
        metavar="TEXT",
        default=None,
        help="system message put before each text line's message (default: none)",
    )
    p.add_argument(
        "--template",
        metavar="TEXT",
        default=None,
        help="wrap each text line: TEXT with {text} where the line goes "
        "(default: the line as it is)",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="give text lines to the model as they are, without the chat "
        "template (default: off: the model's chat template is applied)",
    )


def _read_flag_file(flag: str, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise ValueError(
            f"{flag} {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None


def _constraint(args: argparse.Namespace) -> dict[str, Any]:
    if args.choices is not None:
        labels = [c.strip() for c in args.choices.split(",")]
        if not all(labels):
            raise ValueError(
                f"--choices {args.choices!r} has an empty choice; give "
                "comma-separated strings such as bug,billing"
            )
        return {"choices": labels}
    if args.json_schema is not None:
        text = _read_flag_file("--json-schema", args.json_schema)
        try:
            return {"json_schema": json.loads(text)}
        except ValueError as exc:
            raise ValueError(f"--json-schema {args.json_schema}: not valid JSON ({exc})") from None
    if args.grammar is not None:
        return {"grammar": _read_flag_file("--grammar", args.grammar)}
    return {}


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    """The :class:`SamplingParams` of the options :func:`add_item_options` added: the
    job's default item fields (:func:`llamabatch.items.item_fields`).

    Raises:
        ValueError: a value out of range, or a constraint file that cannot be read.
    """
    flags = {k: v for k, v in vars(args).items() if k not in BATCH_DEFAULTS}
    flags.update({"choices": None, "json_schema": None, "grammar": None, **_constraint(args)})
    return with_fields(SamplingParams(), item_fields(flags))


def config_of(args: argparse.Namespace, paged: bool = False) -> BatchConfig:
    """The run's :class:`BatchConfig`: its fields from the options named as them, the
    sampling from :func:`sampling_params` (checked once, named by flag through
    :func:`~.common.usage_error`).

    Raises:
        ValueError: a value out of range, ``--page-size`` unless ``paged`` (a pool or Ray).
    """
    if args.page_size is not None and not paged:
        raise ValueError(
            "--page-size is the page of --server and --ray; a local run writes pages of "
            "--slots items"
        )
    options.check_threads(args.threads)
    given = {k: getattr(args, k) for k in BATCH_DEFAULTS if hasattr(args, k)}
    return BatchConfig(**{**given, "sampling": sampling_params(args)})


def run(args: argparse.Namespace) -> int:
    """Run ``llamabatch complete``; return the exit status (0, 1, 2 or 130)."""
    return guarded(PROG, _run, args, "interrupted before any item was written")


@dataclasses.dataclass(slots=True)
class _Job:
    """One run: what it has to write (``todo``, input order), where, and its counts.

    ``n_ctx`` is the model context that --n-ctx-seq set (a local or Ray run), else ``None``;
    ``text_of`` the token texts of the logprobs in openai lines (a local run, or a Ray run
    whose lines ask for logprobs: the model file's vocabulary), else ``None``.
    """

    args: argparse.Namespace
    todo: list[Line]
    out: Output
    skipped: int
    t0: float
    tally: JobTally = dataclasses.field(default_factory=JobTally)
    next_entry: int = 0
    model: str = "llamabatch"
    n_ctx: int | None = None
    text_of: Any = None

    def record(self, item: LineItem, completion: Completion) -> dict[str, Any]:
        """The output line of a completed item, in the chosen --output-format; a prompt
        too long for the model context says which flag sets it."""
        if self.n_ctx is not None and not completion.ok:
            n_prompt = completion.n_prompt_tokens
            if n_prompt >= self.n_ctx:  # the library names n_ctx, the job --n-ctx-seq
                completion = dataclasses.replace(
                    completion,
                    error=f"{completion.error}; --n-ctx-seq {self.args.n_ctx_seq} sets it: "
                    f"raise --n-ctx-seq above {n_prompt} (the prompt) plus the reply's "
                    "max_tokens",
                )
        if self.args.output_format == "openai":
            chat = item.url == CHAT_URL if item.url else item.messages is not None
            return batch_line(
                item.id, completion, self.model, chat=chat, text_of=self.text_of, prompt=item.prompt
            )
        return completion_record(item, completion)

    def bad_record(self, bad: Any) -> dict[str, Any]:
        """The output line of a bad input line, in the chosen --output-format."""
        if self.args.output_format == "openai":
            return batch_error_line(bad.id, "invalid_request", bad.error)
        return error_record(bad)

    def records(
        self, items: list[LineItem], positions: list[int], group: Sequence[Completion]
    ) -> Iterator[dict[str, Any]]:
        """The records of one group, after the bad lines that come before it."""
        for completion in group:
            position = positions[completion.index]
            yield from self.rest(position)
            self.tally.add(completion)
            self.next_entry = position + 1
            yield self.record(items[completion.index], completion)

    def rest(self, stop: int | None = None) -> Iterator[dict[str, Any]]:
        """The records of the bad lines from the next entry to ``stop`` (default: all)."""
        stop = len(self.todo) if stop is None else stop
        while self.next_entry < stop:
            bad = self.todo[self.next_entry]  # a BadLine: records() writes the items
            self.tally.add_bad()
            self.next_entry += 1
            yield self.bad_record(bad)

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        """Write ``records`` (:meth:`records`, :meth:`rest`); the tally counts only the
        lines that reached the output.

        Raises:
            OutputWriteError: as :meth:`Output.write`.
        """
        lines = list(records)  # counted in the tally as they were made
        try:
            self.out.write(lines)
        except OutputWriteError as exc:
            self.tally.items -= len(lines) - exc.written
            raise

    @property
    def _resume_hint(self) -> str:
        """What to do to continue the job: resume OUT, or write to a file to be able to."""
        if self.out.is_file:
            return "run the same command with --resume to continue"
        return "to be able to resume, write to a file (-o OUT) and use --resume"

    def failed(self, exc: LlamaBatchError) -> int:
        """Say that the job stopped on ``exc`` and how many items reached the output."""
        error_line(
            PROG,
            f"{exc}; {self.tally.items} of {len(self.todo)} items were written to "
            f"{self.out.where}, in input order; {self._resume_hint}",
        )
        return EXIT_FAILURE

    def summary(self, gen_s: float, note: str) -> None:
        busy = (
            busy_cpu_warning(load_average(), os.cpu_count(), self.args.threads)
            if gen_s >= BUSY_MIN_S
            else None
        )
        if busy is not None:
            _warn(busy)
        if not self.args.quiet:
            print(
                summary_line(
                    self.tally,
                    len(self.todo),
                    time.perf_counter() - self.t0,
                    gen_s,
                    note,
                    self.skipped,
                    self.out.where,
                ),
                file=sys.stderr,
                flush=True,
            )

    def interrupted(self) -> int:
        before = f" (after the {self.skipped} already there)" if self.skipped else ""
        error_line(
            PROG,
            f"interrupted: {self.tally.items} of {len(self.todo)} items were "
            f"written to {self.out.where}{before}, in input order; {self._resume_hint}",
        )
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    urls = runners.server_urls(args)
    try:
        config = config_of(args, paged=bool(urls) or args.ray is not None)
    except ValueError as exc:
        raise usage_error(exc, args) from None
    runners.check_ray(args, urls)
    if args.keep_other_ids and not args.resume:
        raise UsageError("--keep-other-ids needs --resume")
    if args.allow_changed_options and not args.resume:
        raise UsageError("--allow-changed-options needs --resume")
    entries = read_prompts(args.prompts, args.format, skip_bad=args.skip_bad, warn=_warn)
    if not entries:  # as bench and tune refuse it
        raise UsageError(
            f"{args.prompts} holds no prompts: a job needs at least one (a JSONL line with "
            '"prompt" or "messages", or a line of text)'
        )
    try:
        entries = with_text_template(
            entries, system=args.system, template=args.template, raw=args.raw
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.output_format == "openai":
        _check_custom_ids(args.prompts, entries)
    samplings = item_samplings(entries, config.sampling, args.prompts)  # lines + flags
    interrupts = Interrupts()
    with (
        open_output(
            args.output, args.prompts, resume=args.resume, overwrite=args.overwrite, warn=_warn
        ) as out,
        interrupts.installed(),
    ):
        _keep_fingerprint(args, out, entries, reply_options(args, config))
        todo = [e for e in entries if id_key(e.id) not in out.done]
        job = _Job(args, todo, out, skipped=len(entries) - len(todo), t0=t0)
        foreign = len(out.done - {id_key(e.id) for e in entries})
        if foreign:  # --keep-other-ids
            note(
                args,
                f"{out.where} holds {foreign} ids that are not in {args.prompts} "
                "(kept as they are)",
            )
        if not any(isinstance(e, LineItem) for e in todo):
            return _finish_without_model(job, interrupts, entries)
        if urls:  # a pool of servers instead of a local model
            pool = runners.open_pool(args, urls, config)
            return _generate(job, pool, job_items, lambda: runners.pool_note(pool), interrupts)
        path = model_path(args.model, quiet=args.quiet, note=lambda m: note(args, m))
        job.model, job.n_ctx = path.name, cast(int, config.n_ctx_seq)
        if args.ray is not None:  # Ray Data: the actors load the model and its template
            ray_job = runners.open_ray_job(args, path, config)
            with contextlib.ExitStack() as vocab:
                if args.output_format == "openai" and any(s.logprobs for s in samplings):
                    # the actors send token ids; their text is the model file's vocabulary's
                    job.text_of = vocab.enter_context(token_text_of_file(path))
                return _generate(job, ray_job, runners.ray_rows, ray_job.note, interrupts)
        with loaded_llama(
            path,
            n_ctx=job.n_ctx,
            n_threads=args.threads,
            n_gpu_layers=args.n_gpu_layers,
            n_ctx_flag="--n-ctx-seq",
        ) as llm:
            interrupts.check()  # a signal during the load (maybe dropped in a callback)
            job.n_ctx = int(llm.n_ctx())  # llama.cpp may pad it
            job.todo = with_chat_prompts(llm, todo, args.prompts, skip_bad=args.skip_bad)
            interrupts.check()
            gen = runners.open_local(llm, config, args)
            if gen.slots_choice is not None:
                note(args, gen.slots_choice.reason)
            job.text_of = token_text(llm, gen.backend.vocab)  # the logprobs' token texts (openai)
            summary = lambda: batching_note(cast(int, gen.config.slots), gen.stats)  # noqa: E731
            return _generate(job, gen, job_items, summary, interrupts)


def reply_options(args: argparse.Namespace, config: BatchConfig) -> dict[str, Any]:
    """The job's options that shape a reply, kept in OUT's fingerprint: every sampling
    field (constraints included), ``max_tokens``, the model file (path and size; the
    default model by name), ``--system``, ``--template``, ``--raw``, and the servers of a
    pool (their model answers)."""
    model: dict[str, Any] = {"file": DEFAULT_MODEL.filename}
    if args.model is not None:
        model = {"file": str(Path(args.model).resolve())}
        with contextlib.suppress(OSError):
            model["bytes"] = Path(args.model).stat().st_size
    return {
        **dataclasses.asdict(config.sampling),
        "max_tokens": config.sampling.max_tokens or config.max_tokens,
        "model": model,
        "system": args.system,
        "template": args.template,
        "raw": args.raw,
        "server": sorted(runners.server_urls(args)),
    }


def _keep_fingerprint(
    args: argparse.Namespace, out: Output, entries: list[Line], options: dict[str, Any]
) -> None:
    """With --resume, check that OUT may be continued with this input (no ids of another
    input unless --keep-other-ids, no line of an id in OUT changed since, the same
    options unless --allow-changed-options); then keep the input's fingerprint and the
    options beside OUT (:mod:`.job.resume`).

    Raises:
        UsageError: see :func:`~.job.resume.check_resume`.
    """
    if out.path is None:  # standard output, a pipe: nothing to resume
        return
    kept = {}
    if args.resume:
        _check_format(args, out)
        if args.output_format == "openai":  # custom_id "7" is the line of id 7
            out.rekey({id_key(custom_id_of(e.id)): id_key(e.id) for e in entries})
        plan = check_resume(
            out.path,
            out.ids,
            args.prompts,
            entries,
            errors=out.errors,
            options=options,
            allow_changed_options=args.allow_changed_options,
            keep_other_ids=args.keep_other_ids,
            warn=_warn,
        )
        if plan.redo:
            out.drop(plan.redo)
            note(
                args,
                f"{out.where}: {len(plan.redo)} error lines whose input line changed since "
                "were removed, to be done again",
            )
        kept = plan.kept
    write_fingerprint(out.path, args.prompts, entries, kept, options)


def _check_custom_ids(prompts: Path, entries: list[Line]) -> None:
    """Refuse two ids that would be one ``custom_id`` (``7`` and ``"7"``)."""
    first: dict[str, Line] = {}
    for e in entries:
        other = first.setdefault(custom_id_of(e.id), e)
        if other is not e:
            raise UsageError(
                f"{prompts}:{e.line}: ids {id_key(other.id)} (line {other.line}) and "
                f"{id_key(e.id)} (line {e.line}) are one custom_id, "
                f"{json.dumps(custom_id_of(e.id))}, in --output-format openai (a string): "
                "give one of them another id"
            )


def _check_format(args: argparse.Namespace, out: Output) -> None:
    """Refuse to append lines of another ``--output-format`` than OUT holds (whatever
    --allow-changed-options says: one file, one format)."""
    other = sorted(out.formats - {args.output_format})
    if other:
        raise UsageError(
            f"{out.where} holds lines written with --output-format {other[0]}, and this run "
            f"writes --output-format {args.output_format}: run with --output-format "
            f"{other[0]} to resume it, give --overwrite to start over, or write to another "
            "file (-o)"
        )


def _finish_without_model(job: _Job, interrupts: Interrupts, entries: list[Line]) -> int:
    try:
        with interrupts.held():
            job.write(job.rest())
    except KeyboardInterrupt:
        return job.interrupted()
    except OutputWriteError as exc:
        return job.failed(exc)
    if not job.todo:
        note = f"nothing to do: all {len(entries)} items are already in {job.out.where}"
    else:
        note = "no item for the model"
    job.summary(0.0, note)
    return EXIT_OK


_Item = TypeVar("_Item")


def _generate(
    job: _Job,
    runner: runners.JobRunner[_Item],
    items_of: Callable[[list[LineItem]], Iterable[_Item]],
    summary: Callable[[], str],
    interrupts: Interrupts,
) -> int:
    """Write the records of ``runner.iter_groups(items_of(items))`` page by page (the
    runner's sampling is the flags', each item carries its line's fields) and close the
    runner; ``summary()`` ends the summary line."""
    t_gen = time.perf_counter()
    items = [e for e in job.todo if isinstance(e, LineItem)]
    positions = [k for k, e in enumerate(job.todo) if isinstance(e, LineItem)]
    with interrupts.held():  # a signal inside tqdm's constructor would leave half a bar
        bar = progress_bar(len(job.todo), job.args.quiet)
    try:
        with contextlib.closing(runner):
            for group in runner.iter_groups(items_of(items)):
                with interrupts.held():
                    job.write(job.records(items, positions, group))
                bar.set_postfix(alone=job.tally.alone_share, refresh=False)
                bar.update(job.tally.items - bar.n)
            with interrupts.held():
                job.write(job.rest())
            bar.update(job.tally.items - bar.n)
    except KeyboardInterrupt:
        bar.close()
        return job.interrupted()
    except LlamaBatchError as exc:  # e.g. no server of the pool answers any more
        bar.close()
        return job.failed(exc)
    except BrokenPipeError:
        bar.close()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    bar.close()
    job.summary(time.perf_counter() - t_gen, summary())
    return EXIT_OK
