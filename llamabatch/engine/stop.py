"""The stop rule: one :class:`StopRule` per sequence decides where its reply ends.

Checked in a fixed order after each sampled token, the same way in a batch and alone
(vLLM v1's ``check_stop``, ``vllm/v1/core/sched/utils.py``, orders its checks the same):

1. the token is an end-of-generation token (``llama_vocab_is_eog``) → ``"stop"``, the
   token is not part of the reply;
2. the token is one of ``SamplingParams.stop_token_ids`` → ``"stop"``, not part of it;
3. the reply text now holds a ``SamplingParams.stop`` string → ``"stop"``; the token is
   kept in ``token_ids`` but the text ends before the stop string;
4. the reply holds ``max_tokens`` tokens → ``"length"``.

Stop strings follow ``Llama.create_completion(stop=...)`` (llama-cpp-python 0.3.x): after
each token the whole reply is decoded and searched, so a stop string split across tokens
is found; the text is cut before it, and the tokens generated so far, the one that
completed the stop string included, stay in ``token_ids`` (``create_completion`` counts
them in ``usage.completion_tokens`` too; vLLM also keeps them). When several stop
strings appear, the reply ends before the earliest one (``create_completion`` takes the
first of its ``stop`` list present; the two differ only when two stop strings are
completed by the same token).

Pure Python: the text comes from a ``detokenize`` callable (token ids → ``str``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Literal

StopReason = Literal["stop", "length"]

#: One reply token's log-probabilities: ``(token_id, logprob)`` pairs (see ``Completion``).
TokenLogprobs = tuple[tuple[int, float], ...]


class StopRule:
    """The reply of one sequence, token by token, and the decision where it stops.

    Args:
        max_tokens: most tokens to keep (>= 1).
        eog_ids: end-of-generation token ids.
        detokenize: token ids → text (all at once, as ``Backend.detokenize``).
        stop: stop strings (may be empty).
        stop_token_ids: extra ids that end the reply.

    Attributes:
        token_ids: the kept tokens (see the module doc for a stop string).
        finish_reason: ``"stop"`` / ``"length"`` once finished, else ``None``.
        logprobs: one entry per kept token when the caller passes them to :meth:`add`.
    """

    __slots__ = (
        "max_tokens",
        "_eog",
        "_stop_ids",
        "_stop",
        "_detokenize",
        "token_ids",
        "finish_reason",
        "logprobs",
        "_text",
        "_longest",
        "_searched",
    )

    def __init__(
        self,
        max_tokens: int,
        eog_ids: Collection[int],
        detokenize: Callable[[Sequence[int]], str],
        stop: Sequence[str] = (),
        stop_token_ids: Collection[int] = (),
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} is out of range: valid is >= 1")
        self.max_tokens = max_tokens
        self._eog = eog_ids
        self._stop_ids = frozenset(stop_token_ids)
        self._stop = tuple(stop)
        self._longest = max((len(s) for s in self._stop), default=0)
        self._detokenize = detokenize
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self.finish_reason: StopReason | None = None
        self._text: str | None = None  # set when a stop string cut it
        self._searched = 0  # characters of the text already searched for stop strings

    @property
    def is_finished(self) -> bool:
        """True once a stop reason was decided."""
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        """The reply text: cut before the stop string, or all tokens decoded at once."""
        if self._text is not None:
            return self._text
        return self._detokenize(self.token_ids)

    def add(self, token: int, logprobs: TokenLogprobs | None = None) -> StopReason | None:
        """Take the token just sampled; return why the reply ends now, or ``None``.

        Raises:
            ValueError: the reply already finished.
        """
        if self.finish_reason is not None:
            raise ValueError("the reply already finished; no token may be added")
        if token in self._eog or token in self._stop_ids:
            self.finish_reason = "stop"
            return self.finish_reason
        self.token_ids.append(token)
        if logprobs is not None:
            self.logprobs.append(logprobs)
        if self._stop and self._cut_at_stop_string():
            self.finish_reason = "stop"
        elif len(self.token_ids) >= self.max_tokens:
            self.finish_reason = "length"
        return self.finish_reason

    def _cut_at_stop_string(self) -> bool:
        text = self._detokenize(self.token_ids)
        # the text searched before held no stop string, so a new one ends in the tail;
        # the last few characters may have changed (a UTF-8 sequence completed)
        start = max(0, self._searched - self._longest - 4)
        self._searched = len(text)
        hits = [i for i in (text.find(s, start) for s in self._stop) if i >= 0]
        if not hits:
            return False
        self._text = text[: min(hits)]
        return True
