"""OpenAI-shaped response dicts of a :class:`~llamabatch.Completion`, field for field as
llama-cpp-python 0.3.x's ``Llama.create_completion`` (``"text_completion"``) and
``create_chat_completion`` (``"chat.completion"``) return them; the one place that builds
them (:mod:`llamabatch.create`, the command line's ``--output-format openai``).

With ``n`` replies (``Completion.samples``) there is one choice per reply, ``index`` j;
``usage.completion_tokens`` counts every reply's tokens. A failed item keeps the keys:
one choice with ``text`` (or ``content``) ``""`` and ``finish_reason`` ``"error"``, and
its message under an added ``"error"`` key.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .completion import Completion, Sample

#: The text of token ids, as the binding shows them (``detokenize`` decoded, bad bytes
#: dropped).
TokenText = Callable[[Sequence[int]], str]


def text_logprobs(reply: Completion | Sample, text_of: TokenText, offset: int) -> dict | None:
    """``create_completion(logprobs=N)``'s layout of a reply's logprobs: ``tokens``,
    ``text_offset`` (``offset`` plus the text of the tokens before; the binding's
    ``offset`` is ``len(prompt)``), ``token_logprobs``, ``top_logprobs`` (the N likeliest
    as text -> logprob, then the chosen token's). ``None`` when none were asked for."""
    if reply.logprobs is None:
        return None
    ids = reply.token_ids
    top = []
    for tok, step in zip(ids, reply.logprobs, strict=True):
        entry = {text_of([t]): lp for t, lp in step}  # the N likeliest, then the chosen
        entry[text_of([tok])] = dict(step)[tok]
        top.append(entry)
    return {
        "tokens": [text_of([t]) for t in ids],
        "text_offset": [offset + len(text_of(ids[:i])) for i in range(len(ids))],
        "token_logprobs": [dict(step)[t] for t, step in zip(ids, reply.logprobs)],
        "top_logprobs": top,
    }


def text_to_chat_logprobs(layout: dict | None) -> dict | None:
    """``create_chat_completion``'s layout of :func:`text_logprobs`' (the binding's
    conversion: ``content`` entries of token, logprob, ``top_logprobs``)."""
    if layout is None:
        return None
    return {
        "content": [
            {
                "token": token,
                "bytes": None,
                "logprob": lp,
                "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in top.items()],
            }
            for token, lp, top in zip(
                layout["tokens"], layout["token_logprobs"], layout["top_logprobs"], strict=True
            )
        ],
        "refusal": None,
    }


def response(
    completion: Completion,
    *,
    model: str,
    chat: bool,
    text_of: TokenText | None = None,
    offset: int = 0,
) -> dict[str, Any]:
    """The response dict of one completion: ``id``, ``object``, ``created``, ``model``,
    ``choices`` (``text`` or ``message``, ``index``, ``logprobs``, ``finish_reason``),
    ``usage``. ``logprobs`` is filled when the completion has them and ``text_of``
    is given (``offset`` as for :func:`text_logprobs`)."""
    replies: Sequence[Sample | Completion] = completion.samples or (completion,)
    choices = []
    for j, r in enumerate(replies):
        layout = text_logprobs(r, text_of, offset) if text_of is not None else None
        choice: dict[str, Any] = {"index": j}
        if chat:
            choice["message"] = {"role": "assistant", "content": r.text}
            choice["logprobs"] = text_to_chat_logprobs(layout)
        else:
            choice = {"text": r.text, "index": j, "logprobs": layout}
        choice["finish_reason"] = r.finish_reason
        choices.append(choice)
    n_tokens = completion.completion_tokens
    body: dict[str, Any] = {
        "id": f"{'chat' if chat else ''}cmpl-{uuid.uuid4()}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": completion.n_prompt_tokens,
            "completion_tokens": n_tokens,
            "total_tokens": completion.n_prompt_tokens + n_tokens,
        },
    }
    if completion.error is not None:
        body["error"] = completion.error
    return body
