"""One at a time, the tagger's loop without llamabatch: ``Llama.create_completion`` for
a prompt (a string or token ids), ``Llama.create_chat_completion`` for a chat (a list of
messages), one call per item, with the item's own sampling.

The keyword arguments are llama-cpp-python's (0.3.x) names for the fields of
:class:`~llamabatch.SamplingParams`; a constraint (``grammar``, ``json_schema``,
``choices``) becomes the same GBNF grammar the engine uses
(:func:`llamabatch.llamacpp.constraints.grammar_of`), given as a ``LlamaGrammar``.
``Llama`` keeps the previous prompt's KV cache, so a prefix shared with the previous
item is not prefilled again, as in a real tagger's loop.

One call gives one generated reply, so an item that asks for more than that (``n`` > 1,
``score_choices`` with ``choices``, ``score_prompt``, ``logprobs``) has no one-at-a-time
counterpart: :func:`check_one_reply` refuses it up front (``tune``, ``bench --prompts``)
rather than time the engine's several replies or scores against one reply. ``logprobs`` is
refused, not passed on: llama-cpp-python 0.3.x's ``create_completion(logprobs=...)``
raises ``ValueError`` unless the ``Llama`` was made with ``logits_all=True``, which
the caller's ``Llama`` usually is not (and which slows every decode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..params import SamplingParams
from .records import TuneReply

#: ``one_at_a_time(prompt, sampling)``: one item completed without llamabatch; its reply
#: (``id`` and ``label`` are filled in by the caller).
OneAtATime = Callable[[object, SamplingParams], TuneReply]


def is_chat(prompt: object) -> bool:
    """True for a list of ``{"role", "content"}`` messages (a chat), not a prompt."""
    return (
        isinstance(prompt, Sequence)
        and not isinstance(prompt, (str, bytes))
        and bool(prompt)
        and all(isinstance(m, Mapping) for m in prompt)
    )


def not_one_reply(sampling: SamplingParams) -> tuple[str, str] | None:
    """What in ``sampling`` asks for more than one generated reply and what to change,
    in words (``("n=3 asks for 3 replies", "give n=1 or drop n")``), or ``None``: ``n``
    > 1, ``score_choices`` with ``choices`` (label scores, no reply), ``score_prompt``,
    ``logprobs`` (see
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


def completion_kwargs(sampling: SamplingParams, max_tokens: int, grammar: Any) -> dict[str, Any]:
    """The keyword arguments of ``create_completion`` / ``create_chat_completion`` for
    ``sampling`` (reply cap: ``sampling.max_tokens`` or ``max_tokens``).

    Raises:
        ValueError: ``sampling`` asks for more than one reply (:func:`not_one_reply`).
    """
    problem = not_one_reply(sampling)
    if problem is not None:
        raise ValueError(f"{problem[0]}, but Llama.create_completion gives one reply: {problem[1]}")
    kwargs: dict[str, Any] = dict(
        max_tokens=sampling.max_tokens or max_tokens,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        typical_p=sampling.typical_p,
        repeat_penalty=sampling.repeat_penalty,
        frequency_penalty=sampling.frequency_penalty,
        presence_penalty=sampling.presence_penalty,
        seed=sampling.seed,
        stop=list(sampling.stop) or None,
    )
    if grammar is not None:
        kwargs["grammar"] = grammar
    return kwargs


def llama_one_at_a_time(llm: Any, max_tokens: int) -> OneAtATime:
    """The :data:`OneAtATime` of a loaded ``llama_cpp.Llama``. An item that raises gets
    its error as its reply (``finish_reason "error"``); Ctrl-C is not caught."""
    from llama_cpp.llama_grammar import LlamaGrammar

    from ..llamacpp.constraints import grammar_of
    from ..locks import llm_lock

    grammars: dict[str, Any] = {}

    def one(prompt: object, sampling: SamplingParams) -> TuneReply:
        chat = is_chat(prompt)
        path = "create_chat_completion" if chat else "create_completion"
        try:
            text = grammar_of(sampling)
            grammar = None
            if text is not None:
                if text not in grammars:
                    grammars[text] = LlamaGrammar.from_string(text, verbose=False)
                grammar = grammars[text]
            kwargs = completion_kwargs(sampling, max_tokens, grammar)
            with llm_lock(llm):
                if chat:
                    out = llm.create_chat_completion(messages=prompt, **kwargs)
                    reply = out["choices"][0]["message"].get("content") or ""
                else:
                    out = llm.create_completion(prompt, **kwargs)
                    reply = out["choices"][0]["text"]
        except Exception as exc:  # one item's failure never ends the run
            return TuneReply(0, "", "error", f"{type(exc).__name__}: {exc}", 0, path)
        finish = out["choices"][0].get("finish_reason") or "stop"
        return TuneReply(0, reply, finish, None, int(out["usage"]["completion_tokens"]), path)

    return one
