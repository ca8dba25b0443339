"""One at a time, the tagger's loop without llamabatch: one ``Llama.create_completion``
(``create_chat_completion`` for a chat) per item, with the item's own sampling under
llama-cpp-python's names, its constraint as the GBNF the engine uses
(:func:`llamabatch.llamacpp.constraints.grammar_of`). The ``Llama`` keeps the previous
prompt's KV cache, so a prefix shared with the previous item is not prefilled again.

One call gives one generated reply: an item asking for more (``n`` > 1, ``score_choices``
with ``choices``, ``logprobs``, which ``create_completion`` gives only with
``logits_all=True``), or for what no argument carries (``stop_token_ids``), has no
one-at-a-time counterpart and is refused up front (:func:`check_one_reply`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import LlamaBatchError
from ..items import is_messages
from ..params import SamplingParams
from ..shapes.sampling_map import COMPLETION_FIELDS, completion_kwargs, llama_settings, unsupported
from .records import PassReplies, PassReply, WorkItem
from .rounds import Progress


def not_one_reply(sampling: SamplingParams) -> tuple[str, str] | None:
    """What in ``sampling`` asks for more than one generated reply and what to change,
    in words (``("n=3 asks for 3 replies", "give n=1 or drop n")``), or ``None``: ``n``
    > 1, ``score_choices`` with ``choices`` (label scores, no reply), ``logprobs`` (see
    the module's note)."""
    if sampling.n != 1:
        return f"n={sampling.n} asks for {sampling.n} replies", "give n=1 or drop n"
    if sampling.scores_labels:
        return (
            "score_choices asks for label scores instead of a reply",
            "drop score_choices (the reply is then generated under its choices)",
        )
    if sampling.score_prompt:
        return "score_prompt asks for the prompt's scores instead of a reply", "drop score_prompt"
    if sampling.logprobs is not None:
        return (
            f"logprobs={sampling.logprobs} asks for log-probabilities (Llama.create_completion "
            "gives them only with logits_all=True)",
            "drop logprobs",
        )
    refused = unsupported(sampling, COMPLETION_FIELDS)
    if refused:
        return f"{refused[0]} has no Llama.create_completion argument", f"drop {refused[0]}"
    return None


def check_one_reply(
    samplings: Sequence[SamplingParams], where: Callable[[int], str], command: str = "tune"
) -> None:
    """Refuse the first item whose sampling asks for more than one generated reply.

    Args:
        samplings: each item's sampling.
        where: ``where(k)``: how the user finds item ``k`` (``"prompts[3]"``,
            ``"items.jsonl:4"``).
        command: what compares the replies, for the message.

    Raises:
        ValueError: naming the item, the field and what to change.
    """
    for k, s in enumerate(samplings):
        problem = not_one_reply(s)
        if problem is not None:
            what, fix = problem
            raise ValueError(
                f"{where(k)}: {what}, but {command} compares one generated reply per item "
                f"with one Llama.create_completion call per item: {fix}"
            )


class OneAtATime:
    """Items completed one after the other, ``one(item)`` each, as a path of
    :func:`~llamabatch.measure.rounds.run_rounds` (its result: the ``PassReplies``)."""

    def __init__(self, one: Callable[[WorkItem], PassReply]) -> None:
        self.one = one

    def __call__(self, items: Sequence[WorkItem], progress: Progress) -> PassReplies:
        replies = []
        for item in items:
            replies.append(self.one(item))
            progress(1)
        return PassReplies(tuple(replies), items_alone=len(replies))

    def close(self) -> None:
        """Nothing to put back here (see :class:`LlamaLoop`)."""


class LlamaLoop(OneAtATime):
    """The ``Llama`` one at a time: one ``create_completion`` (``create_chat_completion``
    for a chat) per :class:`~llamabatch.measure.records.WorkItem`, with its sampling,
    reply cap (its ``max_tokens``, else ``max_tokens``) and constraint (each grammar
    compiled once).

    An item that raises (``ValueError``, ``RuntimeError``, ``LlamaBatchError``: a prompt
    longer than the context, a bad grammar) gets its error as its reply; the loop goes on.
    The ``Llama``'s settings and cache are saved first and put back by :meth:`close`.
    """

    def __init__(self, llm: Any, max_tokens: int) -> None:
        from llama_cpp.llama_grammar import LlamaGrammar

        from .._ffi import set_llm_settings
        from ..llamacpp.llm_state import LlamaGuard
        from ..locks import llm_lock

        super().__init__(self._complete)
        self._llm, self._max_tokens = llm, max_tokens
        self._lock = llm_lock(llm)
        self._compile = LlamaGrammar.from_string
        self._grammars: dict[str, Any] = {}
        self._guard = LlamaGuard(llm)
        self._set = set_llm_settings

    def _grammar(self, sampling: SamplingParams) -> Any:
        from ..llamacpp.constraints import grammar_of

        text = grammar_of(sampling)
        if text is not None and text not in self._grammars:
            self._grammars[text] = self._compile(text, verbose=False)
        return None if text is None else self._grammars[text]

    def _complete(self, item: WorkItem) -> PassReply:
        chat = is_messages(item.prompt)
        path = "create_chat_completion" if chat else "create_completion"
        try:
            kwargs = completion_kwargs(
                item.sampling, self._max_tokens, self._grammar(item.sampling)
            )
            with self._lock:
                self._set(self._llm, llama_settings(item.sampling))
                if chat:
                    out = self._llm.create_chat_completion(messages=item.prompt, **kwargs)
                    text = out["choices"][0]["message"].get("content") or ""
                else:
                    out = self._llm.create_completion(item.prompt, **kwargs)
                    text = out["choices"][0]["text"]
        except (ValueError, RuntimeError, LlamaBatchError) as exc:
            return PassReply(item.id, "", "error", f"{type(exc).__name__}: {exc}", 0, path)
        finish = out["choices"][0].get("finish_reason") or "stop"
        return PassReply(item.id, text, finish, None, int(out["usage"]["completion_tokens"]), path)

    def close(self) -> None:
        """Put the ``Llama``'s settings and cache back as they were."""
        self._guard.restore()


def logits_all_logprob(ref: Any, context: str, continuation: str) -> tuple[float, bool]:
    """``(log P(continuation | context), is_greedy)`` the way a llama-cpp-python user
    computes it on a ``Llama(logits_all=True)`` ``ref``: ``eval`` of ``context +
    continuation`` keeping the prefix its cache already holds (as ``Llama.generate``
    does), the log-softmax of ``scores`` at the continuation's rows summed, greedy when
    each of its tokens is its row's argmax. The continuation's tokens are what follows
    the context's in ``tokenize(context + continuation)`` (BOS as the model wants)."""
    import math

    import numpy as np

    p = ref.tokenize(context.encode(), add_bos=True, special=True)
    full = ref.tokenize((context + continuation).encode(), add_bos=True, special=True)
    k = 0
    while k < min(len(p), len(full)) and p[k] == full[k]:
        k += 1
    cached = ref.input_ids[: ref.n_tokens].tolist()
    keep = 0
    while keep < min(len(cached), k - 1) and cached[keep] == full[keep]:
        keep += 1
    ref.n_tokens = keep
    ref.eval(full[keep:])
    total, greedy = 0.0, True
    for j in range(k, len(full)):
        row = np.asarray(ref.scores[j - 1], dtype=np.float64)
        top = row.max()
        total += row[full[j]] - top - math.log(float(np.exp(row - top).sum()))
        greedy = greedy and int(row.argmax()) == full[j]
    return float(total), greedy
