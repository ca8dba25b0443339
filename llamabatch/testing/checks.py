"""Runs of a generator on a :class:`FakeBackend` and the checks of their results and log (for
the property tests, :mod:`.machine` and programs checking their own configurations).
hypothesis is imported by :func:`run_case` and :func:`check_item` when called."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..completion import Completion
from ..generator import BatchGenerator
from ..params import SamplingParams
from .fake import FakeBackend, FakeBackendViolation
from .records import DecodeCall, SeqLog


@dataclass(frozen=True, slots=True)
class Case:
    """One generator configuration on one fake, and its input; ``sampling`` is ``None`` (the
    generator's default) or one SamplingParams per prompt."""

    fake: FakeBackend
    prompts: list
    slots: int
    n_ctx_seq: int
    n_batch: int
    max_tokens: int
    lookahead: int | None = None
    min_copy_tokens: int = 32
    sampling: tuple[SamplingParams, ...] | None = None
    max_batch_failures: int = 3

    def generator(self) -> BatchGenerator:
        """A new generator on :attr:`fake` with this configuration."""
        return BatchGenerator(
            backend=self.fake,
            slots=self.slots,
            n_ctx_seq=self.n_ctx_seq,
            n_batch=self.n_batch,
            max_tokens=self.max_tokens,
            lookahead=self.lookahead,
            min_copy_tokens=self.min_copy_tokens,
            max_batch_failures=self.max_batch_failures,
        )

    def max_tokens_of(self, k: int) -> int:
        """The cap of prompt ``k`` (its SamplingParams' ``max_tokens``, else the case's)."""
        if self.sampling is None:
            return self.max_tokens
        return self.sampling[k].max_tokens or self.max_tokens


@dataclass(slots=True)
class CaseRun:
    """What :func:`run_case` of a :class:`Case` gave: its pages, warnings logged, the generator."""

    pages: list[list[Completion]]
    n_warnings: int
    generator: BatchGenerator
    batching_after: list[bool] = field(default_factory=list)

    @property
    def completions(self) -> list[Completion]:
        return [c for page in self.pages for c in page]


@contextmanager
def counting_warnings() -> Iterator[list[logging.LogRecord]]:
    """Collect the "batching turned off" WARNING records of the ``llamabatch`` logger."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.addFilter(lambda record: "batching turned off" in record.getMessage())
    handler.emit = records.append
    logger = logging.getLogger("llamabatch")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def run_case(
    case: Case,
    prompts: list | None = None,
    stop_after: int | None = None,
    gen: BatchGenerator | None = None,
    sampling: Sequence[SamplingParams] | None = None,
) -> CaseRun:
    """Run ``prompts`` (default: the case's) through ``iter_groups``, stopping after
    ``stop_after`` pages (``None``: all); AssertionError when the fake saw a broken rule."""
    from hypothesis import event

    gen = case.generator() if gen is None else gen
    items = case.prompts if prompts is None else prompts
    if sampling is None and prompts is None and case.sampling is not None:
        sampling = list(case.sampling)
    out = CaseRun([], 0, gen)
    with counting_warnings() as records:
        pages = gen.iter_groups(items, sampling)
        try:
            for page in itertools.islice(pages, stop_after):
                out.pages.append(page)
                out.batching_after.append(gen.stats.batching_enabled)
        except FakeBackendViolation as exc:  # a failure hypothesis can shrink
            raise AssertionError(f"FakeBackendViolation: {exc}") from exc
        finally:
            pages.close()
    out.n_warnings = len(records)
    n_batched = sum(c.path == "batch" for c in out.completions)
    event(f"items batched: {'0' if not n_batched else '<10' if n_batched < 10 else '>=10'}")
    event(f"batching off: {gen.stats.batch_disabled_reason is not None}")
    event(f"cache reused: {gen.stats.prompt_tokens_cached > 0}")
    event(f"prefix copied: {gen.stats.prefix_copies > 0}")
    return out


def tokens_or_none(fake: FakeBackend, prompt: object) -> tuple[int, ...] | None:
    """The prompt's token ids, or ``None`` when it is an error item."""
    try:
        return fake.prompt_tokens(prompt)
    except ValueError:
        return None


def check_item(case: Case, k: int, prompt: object, c: Completion) -> None:
    """One item: the reference reply alone (whatever its path and cache), or an error."""
    from hypothesis import note

    fake = case.fake
    tokens = tokens_or_none(fake, prompt)
    note(f"item {c.index}: {prompt!r} -> {c}")
    if tokens is None or (c.path == "alone" and fake.fails_alone(tokens)):
        assert (c.finish_reason, c.path, c.token_ids, c.text) == ("error", "alone", (), "")
        assert c.error
        return
    cap = case.max_tokens_of(k)
    exp = fake.expected(prompt, cap, case.sampling[k] if case.sampling is not None else None)
    assert (c.token_ids, c.finish_reason, c.text, c.error) == (
        exp.token_ids,
        exp.finish_reason,
        exp.text,
        None,
    )
    assert c.n_prompt_tokens == len(tokens)
    assert len(c.token_ids) <= cap
    assert not fake.eog_ids & set(c.token_ids)
    if c.path == "batch":  # only what fits a slot is batched
        budget = min(cap, fake.n_ctx - len(tokens))
        assert len(tokens) + budget <= fake.limits.n_ctx_seq


def check_pages(
    case: Case, result: CaseRun, items: list | None = None, first: int = 0, complete: bool = True
) -> None:
    """Pages of ``slots`` items in input order, one completion per input item, each the
    reference reply or an error in its place."""
    items = case.prompts if items is None else items
    start = 0
    for page in result.pages:
        assert len(page) == min(case.slots, len(items) - start)
        assert [c.index for c in page] == list(range(start, start + len(page)))
        for c in page:
            check_item(case, first + c.index, items[c.index], c)
        start += len(page)
    if complete:
        assert start == len(items)
    flags = result.batching_after
    assert all(a or not b for a, b in zip(flags, flags[1:])), "batching turned back on"


def check_log(case: Case) -> None:
    """No violation, and every item run in a slot: fed its prompt after what its cache held,
    sampled from its first logits, stopped by the stop rule."""
    fake = case.fake
    assert fake.violations == []
    for call in fake.calls(DecodeCall):
        assert 0 < call.n_tokens <= fake.limits.n_batch
    for seq in fake.seqs():
        if seq.error_code is not None or seq.prompt_end is None:
            continue
        assert len(seq.cached) < len(seq.prompt), "the prompt's last token was not decoded"
        assert seq.prompt[: len(seq.cached)] == seq.cached
        out = seq.outputs
        assert out, "a sequence never sampled"
        assert not fake.eog_ids & set(out[:-1]), "decoded after an EOG"


def check_batched(case: Case, result: CaseRun, items: list | None = None) -> None:
    """Every batched completion came from one run of its own prompt in a slot."""
    items = case.prompts if items is None else items
    unused: list[SeqLog] = [
        s for s in case.fake.seqs() if s.error_code is None and s.prompt_end is not None
    ]
    for c in result.completions:
        if c.path != "batch":
            continue
        tokens = case.fake.prompt_tokens(items[c.index])
        match = next(
            (
                s
                for s in unused
                if s.prompt == tokens and s.outputs[: len(c.token_ids)] == c.token_ids
            ),
            None,
        )
        assert match is not None, f"item {c.index}: no slot run fed its prompt"
        unused.remove(match)
