"""One item in flight: :class:`Request`, its :class:`RequestStatus`, and the stop rule.

A prompt is a ``str`` (tokenized like ``Llama.create_completion``: special tokens parsed),
``bytes`` (or ``bytearray``, or a ``memoryview`` of bytes) holding UTF-8 text, or a
sequence of token ids in [0, n_vocab). Anything else, or a prompt with no tokens, is the
request's error, in its own place (:func:`prepare` never raises).

The stop rule (:func:`check_stop`) is checked in a fixed order after each sampled token,
the same in a batch and alone (vLLM v1's ``check_stop`` orders its checks the same): an
end-of-generation token, then ``stop_token_ids`` (neither is part of the reply), then the
``stop`` strings (the text is cut before the earliest one, the tokens stay, as
``Llama.create_completion`` does), then ``max_tokens`` (``"length"``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ..completion import Completion, FinishReason, Path, cut_off_choice
from ..errors import BackendError
from ..params import SamplingParams
from .step import SeqOutput, Span, Targets, TokenLogprobs

if TYPE_CHECKING:
    from .backend import SeqState, Vocab

#: ``memoryview.format`` values read as the bytes of UTF-8 text (unsigned bytes, chars).
BYTE_FORMATS = frozenset({"B", "c"})

#: Characters one token may stand for, at most, for the refusal of a text prompt by its
#: size before it is tokenized: far above any vocabulary's longest piece (byte-pair
#: vocabularies' longest are runs of tens of spaces or dashes), so only a text that could
#: never fit the context is refused this way.
MAX_CHARS_PER_TOKEN = 1024


class RequestStatus(IntEnum):
    """Where a request stands; ordered so ``status >= FINISHED`` means done."""

    WAITING = 0  # not in a slot
    COPYING = 1  # in a slot, waiting for another slot's cache (a prefix, or a shared row)
    PREFILL = 2  # feeding its goal's tokens
    DECODE = 3  # feeding back its last sampled token, one per step
    FINISHED = 4


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """Copy slot ``src``'s cache once it holds ``n_tokens`` shared tokens, keep those."""

    src: int
    n_tokens: int


class Request:
    """One item's prompt, sampling, reply so far and place in the engine.

    The engine and the scheduler drive a request through the hooks below; a feature
    (:mod:`llamabatch.engine.features`) overrides them to ask for other outputs. The
    default generates a reply: its goal is the prompt, its last row samples, then each
    sampled token is fed back until :func:`check_stop` ends it.

    Args:
        index: position of the item in the input.
        prompt: token ids (empty when ``error`` is set).
        sampling: the item's sampler chain and reply rules.
        prompt_text: the prompt's text when given as text, else ``None``.
        error: why the item cannot be completed, or ``None``.
        sample: which reply of ``sampling.n`` this is (0 for the first).
        group: requests of one group with equal prompts may share a prefill
            (``Span.share``); ``None``: none.

    Attributes:
        max_tokens: most reply tokens (set by the scheduler: :meth:`need` counts it).
        status, seq_id, path: where it runs (``seq_id`` -1 outside a slot).
        token_ids, logprobs, finish_reason, error: the reply so far.
        fed: prompt tokens its slot's cache has held (reused, copied or prefilled).
        copy, breaks, followers, checkpoint: the engine's plans for its cache: a copy to
            wait for, prompt lengths where a prefill call must stop (so another slot can
            copy exactly there), requests sharing its last prompt row, and a saved state
            ``(state, tokens)`` to come back to.
    """

    #: The last row of the goal samples a token (else nothing is sampled).
    samples = True
    #: Its rows are read as numbers (``Span.precise``).
    precise = False
    #: It comes back to an earlier position of its cache (checkpoints may be needed).
    returns = False
    #: Why it may not fit a slot (a ``Stats.alone_reasons`` key), and what to change.
    too_long = ("n_prompt_tokens + max_tokens > n_ctx_seq", "lower max_tokens")

    def __init__(
        self,
        index: int,
        prompt: list[int],
        sampling: SamplingParams,
        *,
        prompt_text: str | None = None,
        error: str | None = None,
        sample: int = 0,
        group: int | None = None,
    ) -> None:
        self.index, self.prompt, self.sampling = index, prompt, sampling
        self.prompt_text = prompt_text
        self.sample, self.group = sample, group
        self.max_tokens = 1
        self._given_error = error
        self._detokenize: Callable[[Sequence[int]], str] = _unbound
        self._eog: Collection[int] = ()
        self.reset()

    def reset(self) -> None:
        """Forget the reply, its own errors and the engine's plans (before it is done
        again alone); an error of its prompt stays."""
        self.error = self._given_error
        self.status = RequestStatus.WAITING if self.error is None else RequestStatus.FINISHED
        self.path: Path = "alone"
        self.seq_id = -1
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self.finish_reason: FinishReason | None = None
        self.fed = 0
        self.copy: CopyPlan | None = None
        self.breaks: set[int] = set()
        self.followers: list[Request] = []
        self.checkpoint: tuple[SeqState, list[int]] | None = None
        self._cut: str | None = None  # the text cut before a stop string
        self._searched = 0  # characters already searched for stop strings

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(index={self.index}, sample={self.sample}, {self.status.name})"
        )

    @property
    def finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED

    # -- hooks: what the request wants ----------------------------------------------------
    def need(self) -> int:
        """Tokens it needs in one slot: the prompt and ``max_tokens``."""
        return len(self.prompt) + self.max_tokens

    def too_long_for(self, n_ctx: int) -> str:
        """Its error when :meth:`need` exceeds the one-at-a-time context ``n_ctx``."""
        return f"it needs {self.need()} tokens; the model context holds n_ctx={n_ctx}"

    def goal(self) -> Sequence[int]:
        """What its cache must hold when its prefill ends (the last row gives the outputs)."""
        return self.prompt

    def on_place(self, checkpoints: bool) -> None:
        """Placed in a slot; ``checkpoints``: the memory needs checkpoints to come back."""

    def keep_limit(self, n: int) -> int:
        """Of ``n`` reusable cached tokens, how many it may keep."""
        return n

    def rows(self, cached: Sequence[int], pos: int, tokens: Sequence[int]) -> Targets | None:
        """The score targets of a span's rows (``Span.targets``), or ``None``."""
        return None

    def take(self, out: SeqOutput, span: Span | None, cached: Sequence[int]) -> None:
        """Take what its rows gave (``cached``: its cache before ``span``; both ``None`` /
        empty alone); the sampled token goes through :func:`check_stop`."""
        if out.error is not None:
            n = len(self.token_ids)
            text = self.reply_text
            self.fail(
                f"{out.error} (after {n} reply token{'s' * (n != 1)}: {text!r}; nothing accepted)"
            )
            return
        if out.token is None:
            return
        reason = check_stop(self, out.token, out.logprobs)
        self.status = RequestStatus.DECODE if reason is None else RequestStatus.FINISHED

    def next_goal(self, cached: Sequence[int], checkpointed: bool) -> int | None:
        """Its cache holds its goal and it sampled nothing: set the next goal and return
        how many cached tokens to keep, or ``None`` when it is done."""
        return None

    def unfold(self) -> None:
        """Its goal becomes the prompt alone (a checkpoint of the prompt is needed)."""

    def alone_job(self) -> tuple[Sequence[int], SamplingParams | None, Targets | None] | None:
        """Its next work outside the batch context (``Backend.run_alone``'s arguments),
        or ``None`` when done."""
        if self.finished:
            return None
        return self.prompt, self.sampling, None

    def result(self) -> Completion:
        """Its completion (once finished)."""
        n_prompt = len(self.prompt)
        if self.error is not None:
            return Completion(self.index, "", (), "error", self.error, n_prompt, self.path)
        text = self.reply_text
        if self.finish_reason == "length":
            cut = cut_off_choice(self.sampling.choices, text, len(self.token_ids))
            if cut is not None:
                return Completion(self.index, "", (), "error", cut, n_prompt, self.path)
        logprobs = tuple(self.logprobs) if self.sampling.logprobs is not None else None
        reason = self.finish_reason or "length"
        return Completion(
            self.index, text, tuple(self.token_ids), reason, None, n_prompt, self.path, logprobs
        )

    # -- state ----------------------------------------------------------------------------
    def fail(self, message: str) -> None:
        """End with its own error."""
        self.error, self.status = message, RequestStatus.FINISHED

    def bind(self, detokenize: Callable[[Sequence[int]], str], eog_ids: Collection[int]) -> None:
        """The vocabulary the stop rule reads (set by the scheduler)."""
        self._detokenize, self._eog = detokenize, eog_ids

    @property
    def reply_text(self) -> str:
        """The reply text: cut before a stop string, or every token decoded at once."""
        if self._cut is not None:
            return self._cut
        return self._detokenize(self.token_ids) if self.token_ids else ""


def _unbound(tokens: Sequence[int]) -> str:
    raise ValueError("the request has no vocabulary: call bind() first")


def check_stop(req: Request, token: int, logprobs: TokenLogprobs | None = None) -> str | None:
    """Add the sampled ``token`` to ``req``'s reply; return why it ends now
    (``"stop"`` / ``"length"``, also set as ``finish_reason``), or ``None``.

    Raises:
        ValueError: the reply already ended.
    """
    if req.finish_reason is not None:
        raise ValueError("the reply already finished; no token may be added")
    sampling = req.sampling
    if token in req._eog or token in sampling.stop_token_ids:
        req.finish_reason = "stop"
        return "stop"
    req.token_ids.append(token)
    if logprobs is not None:
        req.logprobs.append(logprobs)
    if sampling.stop and _cut_at_stop_string(req, sampling.stop):
        req.finish_reason = "stop"
    elif len(req.token_ids) >= req.max_tokens:
        req.finish_reason = "length"
    return req.finish_reason


def _cut_at_stop_string(req: Request, stop: Sequence[str]) -> bool:
    text = req._detokenize(req.token_ids)
    # what was searched held no stop string, so a new one ends in the tail; its last
    # characters may have changed (a UTF-8 sequence completed)
    start = max(0, req._searched - max(map(len, stop)) - 4)
    req._searched = len(text)
    hits = [i for i in (text.find(s, start) for s in stop) if i >= 0]
    if not hits:
        return False
    req._cut = text[: min(hits)]
    return True


def _token_ids(prompt: Any, n_vocab: int) -> list[int]:
    tokens = []
    for k, value in enumerate(prompt):
        try:
            tok = operator.index(value)
        except TypeError:
            raise ValueError(
                f"token {k} is {type(value).__name__} {value!r}; "
                f"token ids are integers in [0, {n_vocab})"
            ) from None
        if not 0 <= tok < n_vocab:
            raise ValueError(f"token {k} is {tok}; token ids are in [0, {n_vocab})")
        tokens.append(tok)
    return tokens


def prepare(
    index: int, prompt: object, sampling: SamplingParams, vocab: Vocab, n_ctx: int
) -> Request:
    """The request of ``prompt``; every failure is its error, never raised."""
    text = None
    try:
        if isinstance(prompt, memoryview) and prompt.format in BYTE_FORMATS:
            prompt = prompt.tobytes()  # bytes of text, not token ids
        if isinstance(prompt, (bytes, bytearray)):
            prompt = bytes(prompt).decode("utf-8")
        if isinstance(prompt, str):
            if len(prompt) > n_ctx * MAX_CHARS_PER_TOKEN:  # tokenizing it costs minutes
                return Request(
                    index, [], sampling,
                    error=f"prompt has {len(prompt)} characters: far more than the model "
                    f"context holds (n_ctx={n_ctx} tokens, and no token stands for more than "
                    f"{MAX_CHARS_PER_TOKEN} characters); shorten it",
                )  # fmt: skip
            text, tokens = prompt, vocab.tokenize(prompt)
        elif isinstance(prompt, Sequence) or hasattr(prompt, "__array__"):
            tokens = _token_ids(prompt, vocab.n_vocab)
        else:
            return Request(
                index, [], sampling,
                error=f"prompt is {type(prompt).__name__}; expected str, UTF-8 bytes or a "
                "list of token ids",
            )  # fmt: skip
    except UnicodeDecodeError as exc:
        return Request(index, [], sampling, error=f"prompt is not valid UTF-8: {exc}")
    except (ValueError, TypeError, BackendError) as exc:  # TypeError: e.g. a 0-d array
        return Request(index, [], sampling, error=f"prompt cannot be tokenized: {exc}")
    if not tokens:
        return Request(index, [], sampling, error="prompt is empty (0 tokens)")
    if len(tokens) >= n_ctx:  # its tokens kept: n_prompt_tokens tells its length
        return Request(
            index, tokens, sampling,
            error=f"prompt has {len(tokens)} tokens; the model context (n_ctx={n_ctx}) holds "
            f"at most {n_ctx - 1} prompt tokens",
        )  # fmt: skip
    return Request(index, tokens, sampling, prompt_text=text)
