"""What a :class:`~llamabatch.Completion` is written as, for every path: the binding's
response dicts, the OpenAI Batch API's output lines, and llamabatch's own records.

- :func:`response`: field for field as llama-cpp-python 0.3.x's ``Llama.create_completion``
  (``"text_completion"``) and ``create_chat_completion`` (``"chat.completion"``) return
  them (``create_completions``, ``--output-format openai``). With ``n`` replies
  (``Completion.samples``) there is one choice per reply, ``index`` j;
  ``usage.completion_tokens`` counts every reply's tokens. A failed item keeps the keys:
  one choice with ``text`` (or ``content``) ``""`` and ``finish_reason`` ``"error"``, and
  its message under an added ``"error"`` key.
- :func:`batch_line` / :func:`batch_error_line`: an OpenAI batch output line,
  ``{"id": "batch_req_...", "custom_id", "response": {"status_code": 200, "request_id",
  "body": <response>}, "error": null}``; a failed item has ``"response": null`` and
  ``"error": {"code", "message"}``.
- :func:`output_record`: the flat record of JSON values a job (local, a pool of servers,
  Ray Data) writes: :data:`OUTPUT_FIELDS` always, then every other field of
  :class:`~llamabatch.Completion` that holds a value (``logprobs``, label scores,
  samples ...) under its own name; :func:`from_json` reads one back.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..completion import Completion, Sample
from ..engine.backend import Vocab

#: The text of token ids, as the binding shows them (``detokenize`` decoded, bad bytes
#: dropped).
TokenText = Callable[[Sequence[int]], str]


def token_text(llm: Any, vocab: Vocab | None = None) -> TokenText:
    """Token ids -> text as the binding shows them in logprobs: ``llm.detokenize`` (a
    ``Llama``, or anything with its ``detokenize(ids) -> bytes``), bad bytes dropped; with
    no ``llm``, ``vocab``'s."""
    if llm is None and vocab is not None:
        return vocab.detokenize
    return lambda ids: llm.detokenize(list(ids)).decode("utf-8", errors="ignore")


def text_logprobs(reply: Completion | Sample, text_of: TokenText, offset: int) -> dict | None:
    """``create_completion(logprobs=N)``'s layout of a reply's logprobs: ``tokens``,
    ``text_offset`` (``offset`` plus the text of the tokens before), ``token_logprobs``,
    ``top_logprobs`` (the N likeliest as text -> logprob, then the chosen token's).
    ``None`` when none were asked for."""
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
    prompt: object = None,
) -> dict[str, Any]:
    """The response dict of one completion: ``id``, ``object``, ``created``, ``model``,
    ``choices`` (``text`` or ``message``, ``index``, ``logprobs``, ``finish_reason``),
    ``usage``. ``logprobs`` is filled when the completion has them and ``text_of``
    is given; their ``text_offset`` counts from ``len(prompt)`` (characters or token ids),
    as the binding's."""
    replies: Sequence[Sample | Completion] = completion.samples or (completion,)
    offset = len(prompt) if isinstance(prompt, (str, Sequence)) else 0
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


def custom_id_of(item_id: str | int) -> str:
    """The ``custom_id`` of an item's batch output line: its id as text (OpenAI's batch
    output types ``custom_id`` as a string; an integer id, such as a line number, as its
    digits)."""
    return str(item_id)


def batch_line(
    item_id: str | int,
    completion: Completion,
    model: str,
    *,
    chat: bool,
    text_of: TokenText | None = None,
    prompt: object = None,
) -> dict[str, Any]:
    """The batch output line of one completed (or failed) item: its :func:`response`
    (``text_of`` and ``prompt`` as there), with llamabatch's own ``choice_probs`` and
    ``votes`` when asked for."""
    if not completion.ok:
        return batch_error_line(item_id, "item_failed", completion.error or "failed")
    body = response(completion, model=model, chat=chat, text_of=text_of, prompt=prompt)
    for key in ("choice_probs", "votes"):
        if getattr(completion, key) is not None:
            body[key] = getattr(completion, key)
    reply = {"status_code": 200, "request_id": uuid.uuid4().hex, "body": body}
    return _envelope(item_id, reply, None)


def batch_error_line(item_id: str | int, code: str, message: str) -> dict[str, Any]:
    """The batch output line of an item that got no reply: ``response`` null, ``error``
    set."""
    return _envelope(item_id, None, {"code": code, "message": message})


def _envelope(item_id: str | int, reply: object, error: object) -> dict[str, Any]:
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id_of(item_id),
        "response": reply,
        "error": error,
    }


#: The fields every record has, in this order.
OUTPUT_FIELDS = ("text", "finish_reason", "error", "n_prompt_tokens", "n_tokens", "path")

#: Completion fields that are not written (the position in the input, the raw token ids).
_NOT_WRITTEN = frozenset({"index", "token_ids"})


def extra_output_names() -> tuple[str, ...]:
    """The optional output fields: :class:`~llamabatch.Completion`'s fields that are
    neither in :data:`OUTPUT_FIELDS` nor internal (``index``, ``token_ids``)."""
    return tuple(
        f.name
        for f in dataclasses.fields(Completion)
        if f.name not in OUTPUT_FIELDS and f.name not in _NOT_WRITTEN
    )


def output_record(completion: Completion) -> dict[str, Any]:
    """The record of one completion: :data:`OUTPUT_FIELDS`, then each optional output
    field that is not ``None``, as JSON values."""
    record: dict[str, Any] = {name: getattr(completion, name) for name in OUTPUT_FIELDS}
    for name in extra_output_names():
        value = getattr(completion, name, None)
        if value is not None:
            record[name] = to_json(value)
    return record


def to_json(value: object) -> Any:
    """``value`` as JSON values: tuples and lists become lists, mappings dicts with
    string keys, dataclasses their fields' dict; other values as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(name: str, value: Any) -> Any:
    """An optional output field read back from its JSON value in
    :class:`~llamabatch.Completion`'s types (:func:`to_json`'s inverse)."""
    if value is None:
        return None
    if name == "samples":
        return tuple(
            Sample(
                s["text"],
                tuple(s["token_ids"]),
                s["finish_reason"],
                s.get("error"),
                from_json("logprobs", s.get("logprobs")),
            )
            for s in value
        )
    if name == "logprobs":
        return tuple(tuple((int(t), float(lp)) for t, lp in step) for step in value)
    return value
