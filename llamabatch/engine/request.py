"""One item in flight: :class:`Request`, its :class:`RequestStatus`, and the stop rule.

A prompt is a ``str`` (tokenized like ``Llama.create_completion``: special tokens parsed),
``bytes`` (or ``bytearray``, or a ``memoryview`` of bytes) holding UTF-8 text, or a
sequence of token ids in [0, n_vocab). Anything else, or a prompt with no tokens, is the
request's error, in its own place (:func:`prepare` never raises).

The stop rule (:func:`check_stop`) is checked in a fixed order after each sampled token,
the same in a batch and alone (vLLM v1's ``check_stop`` orders its checks the same): an
end-of-generation token, then ``stop_token_ids`` (neither is part of the reply), then the
``stop`` strings (the text is cut before the earliest one, the tokens stay, as
``Llama.create_completion`` does), then ``max_tokens`` (``"length"``). Where the vocabulary
gives the reply's bytes (``Vocab.detokenize_bytes``), the ``stop`` and ``max_tokens`` checks
wait while the reply ends inside a UTF-8 character, up to ``Request.max_tail`` more
tokens, and the text drops bytes that are not UTF-8: ``Llama.create_completion``'s rule
(:meth:`Reply.ends_inside_char`), so a reply never ends in U+FFFD.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ..completion import Completion, CompletionPath, FinishReason, cut_off_choice
from ..errors import BackendError
from ..params import SamplingParams
from .step import SeqOutput, Span, Targets, TokenLogprobs

if TYPE_CHECKING:
    from .backend import Vocab

#: ``memoryview.format`` values read as the bytes of UTF-8 text (unsigned bytes, chars).
BYTE_FORMATS = frozenset({"B", "c"})

#: Most tokens a reply may take past ``max_tokens`` to finish a UTF-8 character (a
#: character has at most 4 bytes; each token adds at least one).
MAX_CHAR_TAIL = 3

#: UTF-8 lead bytes (the bits a byte must hold) and the length of their character, in the
#: order ``Llama.create_completion`` tests them (a later match overrides).
_LEAD_BYTES = ((2, 0xC0), (3, 0xE0), (4, 0xF0))

#: Characters one token may stand for, at most, for the refusal of a text prompt by its
#: size before it is tokenized: far above any vocabulary's longest piece (byte-pair
#: vocabularies' longest are runs of tens of spaces or dashes), so only a text that could
#: never fit the context is refused this way.
MAX_CHARS_PER_TOKEN = 1024


class RequestStatus(IntEnum):
    """What a request wants fed next, wherever it runs; ordered so ``status >= FINISHED``
    means done. Whether it runs in a slot, and waits there for another slot's prefix, is
    the slot table's (:class:`~llamabatch.engine.cache.Placement`)."""

    PREFILL = 0  # its run's tokens (its prompt first)
    DECODE = 1  # its last sampled token, one per step
    FINISHED = 2


class Reply:
    """A reply so far and the text the stop rule reads.

    Attributes:
        token_ids: its tokens (an end-of-generation token or a stop token id not among them).
        logprobs: per token, its log-probabilities (when the sampling asks for them).
        finish_reason: ``"stop"`` or ``"length"`` once it ended, else ``None``.
        cut: the text cut before a stop string, or ``None``.
    """

    __slots__ = (
        "token_ids",
        "logprobs",
        "finish_reason",
        "cut",
        "_detokenize",
        "_eog",
        "_window",
        "_bytes",
        "_vocab",
        "_char_wait",
        "_tail",
        "_n_checked",
    )

    def __init__(
        self,
        detokenize: Callable[[Sequence[int]], str],
        eog_ids: Collection[int] = (),
        detokenize_bytes: Callable[[Sequence[int]], bytes] | None = None,
    ) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self.finish_reason: FinishReason | None = None
        self.cut: str | None = None
        self._vocab = (detokenize, eog_ids, detokenize_bytes)
        self._eog, self._bytes = eog_ids, detokenize_bytes
        self._detokenize = detokenize if detokenize_bytes is None else _utf8(detokenize_bytes)
        self._window = 0  # the last tokens searched for stop strings
        self._char_wait = 0  # tokens the binding still waits for to finish a character
        self._tail = b""  # the reply's last 3 bytes (its pieces' bytes, concatenated)
        self._n_checked = 0  # tokens the stop strings were searched in

    def fresh(self) -> Reply:
        """An empty reply read with the same vocabulary."""
        return Reply(*self._vocab)

    @property
    def text(self) -> str:
        """The text: cut before a stop string, or every token decoded at once (where the
        vocabulary gives bytes, those that are not UTF-8 dropped)."""
        if self.cut is not None:
            return self.cut
        return self._detokenize(self.token_ids) if self.token_ids else ""

    def ends_inside_char(self) -> bool:
        """True while the reply (its last token just added) waits for the rest of a UTF-8
        character: ``Llama.create_completion``'s count, kept as it counts (its
        ``multibyte_fix``): a lead byte among the reply's last 3 bytes whose character is
        longer than the bytes from it to the end sets the count to the bytes missing; each
        token added while the count is positive uses one. False where the vocabulary gives no
        bytes. Called once for each token added (one piece decoded)."""
        if self._bytes is None:
            return False
        self._tail = tail = (self._tail + self._bytes(self.token_ids[-1:]))[-3:]
        for j, byte in enumerate(tail):
            k = 3 - j  # the binding's position, from the end (3 for the first of the three)
            for length, lead in _LEAD_BYTES:
                if length > k and byte & lead == lead:
                    self._char_wait = length - k
        if self._char_wait > 0:
            self._char_wait -= 1
            return True
        return False

    def cut_at_stop(self, stop: Sequence[str]) -> bool:
        """True, with :attr:`cut` set, when the tokens added since the last search completed
        one of ``stop`` (the text is cut before the earliest one found).

        Only the last tokens are decoded while none is found: a window holding at least
        ``max(len(s)) + 12`` characters before the new tokens (a tail's first 3 characters
        may differ from the whole text's, at a UTF-8 sequence split between two tokens;
        a new token may change the character before it); the whole text is decoded once,
        on a hit, to cut it."""
        tokens, detok = self.token_ids, self._detokenize
        n, longest = len(tokens), max(map(len, stop))
        old, self._n_checked = min(self._n_checked, n - 1), n
        w = self._window or longest + 8
        while n > w and len(detok(tokens[n - w : old])) < longest + 12:
            w *= 2
        self._window = w
        tail = detok(tokens[n - w :]) if n > w else detok(tokens)
        if not any(s in tail[_TAIL_SKIP * (n > w) :] for s in stop):
            return False
        text = detok(tokens)
        # what came before held no stop string: a new one starts at most `longest` + 4
        # characters before the old text's end (its last characters may have changed)
        start = max(0, len(detok(tokens[:old])) - longest - 4)
        hits = [i for i in (text.find(s, start) for s in stop) if i >= 0]
        if not hits:
            return False
        self.cut = text[: min(hits)]
        return True


def _utf8(detokenize_bytes: Callable[[Sequence[int]], bytes]) -> Callable[[Sequence[int]], str]:
    """Token ids -> the text of their bytes, those that are not UTF-8 dropped (as
    ``Llama.create_completion`` decodes its text)."""
    return lambda tokens: detokenize_bytes(tokens).decode("utf-8", errors="ignore")


#: Characters at the start of a decoded tail that may differ from the whole text's.
_TAIL_SKIP = 3


@dataclass(frozen=True, slots=True)
class Run:
    """What a request wants of its slot until it gives outputs: the engine cuts the
    slot's cache back to at most ``keep`` reusable tokens, prefills it up to ``goal`` and
    hands the request the rows it reads (:meth:`Request.take`).

    Attributes:
        goal: the tokens the cache must hold when the prefill ends.
        keep: the most reusable cached tokens it may keep (the rest is prefilled again).
        samples: the goal's last row samples a token, and each sampled token is fed back
            (a reply); False: once the cache holds ``goal`` the request is asked for its
            next run (:meth:`Request.next_run`), which may keep fewer tokens.
        rows: ``(cached, pos, tokens) -> Targets | None``: the score targets of a span of
            ``tokens`` at ``pos`` after ``cached`` (``Span.targets``; the rows are read as
            numbers); ``None``: no row is read.
    """

    goal: Sequence[int]
    keep: int = sys.maxsize
    samples: bool = True
    rows: Callable[[Sequence[int], int, Sequence[int]], Targets | None] | None = None


class Request:
    """One item's prompt and sampling, its reply so far and its status.

    In a slot it asks for runs (:class:`Run`) and takes what their rows give; a feature
    (:mod:`llamabatch.engine.features`) overrides :meth:`first_run`, :meth:`next_run`,
    :meth:`take` and the work alone to ask for other outputs. The default generates a
    reply: its one run holds the prompt, its last row samples, then each sampled token is
    fed back until :func:`check_stop` ends it. Where it runs in the batch context (its
    slot, the cached tokens, its run, a copy or checkpoint) is the slot table's
    (:class:`~llamabatch.engine.cache.Placement`).

    Args:
        index: position of the item in the input.
        prompt: token ids (empty when ``error`` is set).
        sampling: the item's sampler chain and reply rules.
        prompt_text: the prompt's text when given as text, else ``None``.
        error: why the item cannot be completed, or ``None``.
        sample: which reply of ``sampling.n`` this is (0 for the first).
        group: the item whose ``n`` replies this request is one of; ``None``: none.

    Attributes:
        max_tokens: most reply tokens (set by the scheduler: :meth:`need` counts it).
        max_tail: most tokens past ``max_tokens`` that may finish a UTF-8 character (set by
            the scheduler where the vocabulary gives bytes, from the room the context or
            the slot it runs in has left past :meth:`need`, which does not count it).
        status: what it wants fed next (:class:`RequestStatus`); path: ``"batch"`` once
            completed in a slot, else ``"alone"``.
        reply: the reply so far (:class:`Reply`); error: its error, or ``None``.
    """

    #: Its rows are read as numbers: it needs ``BackendInfo.can_score``.
    precise = False
    #: Why it may not fit a slot (a ``Stats.alone_reasons`` key), and what to change.
    too_long = ("n_prompt_tokens + max_tokens > n_ctx_seq", "lower max_tokens")
    #: The ``Stats.alone_reasons`` key of items that ended with their error before any of
    #: their prompt ran (a bad item, a prompt the context cannot hold, a refused grammar).
    refused = "refused before it ran (its Completion.error says why)"

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
        self.max_tail = 0
        self.path: CompletionPath = "alone"
        self.reply = Reply(_unbound)
        self.error: str | None = None
        self.reset()
        self.error = error
        if error is not None:
            self.status = RequestStatus.FINISHED

    def reset(self) -> None:
        """Forget the reply and its errors (a request in flight at a failure of the batch
        path, before it is done again alone)."""
        self.error = None
        self.status = RequestStatus.PREFILL
        self.reply = self.reply.fresh()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(index={self.index}, sample={self.sample}, {self.status.name})"
        )

    @property
    def finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED

    @property
    def token_ids(self) -> list[int]:
        return self.reply.token_ids

    @property
    def finish_reason(self) -> FinishReason | None:
        return self.reply.finish_reason

    @property
    def reply_text(self) -> str:
        """The reply text: cut before a stop string, or every token decoded at once."""
        return self.reply.text

    # -- what the request wants: its size, its runs, its outputs -----------------------
    def need(self) -> int:
        """Tokens it needs in one slot: the prompt and ``max_tokens`` (``max_tail`` is taken
        only from the room a slot or the context has left)."""
        return len(self.prompt) + self.max_tokens

    def too_long_for(self, n_ctx: int) -> str:
        """Its error when :meth:`need` exceeds the one-at-a-time context ``n_ctx``."""
        return f"it needs {self.need()} tokens; the model context holds n_ctx={n_ctx}"

    def first_run(self, checkpoints: bool) -> Run:
        """Its first run in a slot; ``checkpoints``: a cache cut back to the prompt's end
        comes back only from a saved state (so a run that comes back must hold the prompt
        alone first)."""
        return Run(self.prompt)

    def take(self, out: SeqOutput, span: Span | None, cached: Sequence[int]) -> None:
        """Take what its rows gave (``cached``: its cache before ``span``; both ``None`` /
        empty alone); the sampled token goes through :func:`check_stop`; a complete grammar
        (``SeqOutput.grammar_complete``) ends the reply, ``"stop"``."""
        if out.error is not None:
            n = len(self.reply.token_ids)
            text = self.reply.text
            self.fail(
                f"{out.error} (after {n} reply token{'s' * (n != 1)}: {text!r}; nothing accepted)"
            )
            return
        if out.grammar_complete:  # ends as at an end-of-generation token
            self.reply.finish_reason = "stop"
            self.status = RequestStatus.FINISHED
            return
        if out.token is None:
            return
        reason = check_stop(self, out.token, out.logprobs)
        self.status = RequestStatus.DECODE if reason is None else RequestStatus.FINISHED

    def next_run(self, cached: Sequence[int], checkpointed: bool) -> Run | None:
        """Its run that samples nothing ended with ``cached`` in its slot: the next run,
        or ``None`` when it is done; ``checkpointed``: a saved state of its prompt
        brings the cache back (a run may then decode a single token)."""
        return None

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
        reply = self.reply
        text = reply.text
        if reply.finish_reason == "length":
            cut = cut_off_choice(self.sampling.choices, text, len(reply.token_ids))
            if cut is not None:
                return Completion(self.index, "", (), "error", cut, n_prompt, self.path)
        logprobs = tuple(reply.logprobs) if self.sampling.logprobs is not None else None
        reason = reply.finish_reason or "length"
        return Completion(
            self.index, text, tuple(reply.token_ids), reason, None, n_prompt, self.path, logprobs
        )

    # -- state -------------------------------------------------------------------------
    def fail(self, message: str) -> None:
        """End with its own error."""
        self.error, self.status = message, RequestStatus.FINISHED

    def bind(
        self,
        detokenize: Callable[[Sequence[int]], str],
        eog_ids: Collection[int],
        detokenize_bytes: Callable[[Sequence[int]], bytes] | None = None,
    ) -> None:
        """The vocabulary the stop rule reads (set by the scheduler; ``detokenize_bytes``:
        ``Vocab.detokenize_bytes`` where it has one)."""
        self.reply = Reply(detokenize, eog_ids, detokenize_bytes)


def _unbound(tokens: Sequence[int]) -> str:
    raise ValueError("the request has no vocabulary: call bind() first")


def check_stop(req: Request, token: int, logprobs: TokenLogprobs | None = None) -> str | None:
    """Add the sampled ``token`` to ``req``'s reply; return why it ends now
    (``"stop"`` / ``"length"``, also set as ``finish_reason``), or ``None``.

    Raises:
        ValueError: the reply already ended.
    """
    reply, sampling = req.reply, req.sampling
    if reply.finish_reason is not None:
        raise ValueError("the reply already finished; no token may be added")
    if token in reply._eog or token in sampling.stop_token_ids:
        reply.finish_reason = "stop"
        return "stop"
    reply.token_ids.append(token)
    if logprobs is not None:
        reply.logprobs.append(logprobs)
    if reply.ends_inside_char() and len(reply.token_ids) < req.max_tokens + req.max_tail:
        return None
    if sampling.stop and reply.cut_at_stop(sampling.stop):
        reply.finish_reason = "stop"
    elif len(reply.token_ids) >= req.max_tokens:
        reply.finish_reason = "length"
    return reply.finish_reason


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
