"""OpenAI batch files: request lines in, response lines out.

Input line (OpenAI's Batch API, also read by ``vllm run-batch``)::

    {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "...", "messages": [...], "max_tokens": 20, ...}}

``url`` is ``/v1/chat/completions`` (``body.messages``, formatted with the model's chat
template) or ``/v1/completions`` (``body.prompt``, a string). The body's sampling
fields are the per-item fields of :mod:`.fields` (``max_completion_tokens`` is read as
``max_tokens``); ``model`` is ignored (the job's model answers); ``n`` gives that many
``choices[]``; a chat body's OpenAI ``logprobs: true`` with ``top_logprobs: N`` asks for
``N`` (:func:`~llamabatch.sampling_map.chat_request_logprobs`). A field the binding's calls have
but llamabatch cannot honour (``tools``, ``tool_choice``, ``logit_bias``, ``echo``,
``suffix``...) set to other than off makes the line an error naming it, as
``create_completions`` refuses it
(:func:`~llamabatch.sampling_map.refused_arguments`).

Output line (``--output-format openai``), as the Batch API writes it::

    {"id": "batch_req_...", "custom_id": "r1",
     "response": {"status_code": 200, "request_id": "...", "body": {"id": ...,
                  "object": "chat.completion", "created": ..., "model": ...,
                  "choices": [{"index": 0, "message": {"role": "assistant",
                               "content": ...}, "logprobs": null,
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": ..., "completion_tokens": ...,
                            "total_tokens": ...}}},
     "error": null}

A failed item has ``"response": null`` and ``"error": {"code", "message"}``, in its place.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ...completion import Completion
from ...responses import TokenText, response
from ...sampling_map import OFF, chat_request_logprobs, refused_arguments

CHAT_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
URLS = (CHAT_URL, COMPLETIONS_URL)

#: Body keys read besides the sampling fields, and those accepted without effect.
_BODY_PROMPTS = {CHAT_URL: "messages", COMPLETIONS_URL: "prompt"}
_BODY_IGNORED = frozenset({"model", "stream", "user", "max_completion_tokens"})


def is_request(obj: Mapping[str, Any]) -> bool:
    """True for an OpenAI batch request line: it has a ``custom_id`` (a line without
    ``body`` is a request that lacks it, not a plain line)."""
    return "custom_id" in obj


def custom_id_of(item_id: str | int) -> str:
    """The ``custom_id`` of an item's output line: its id as text (OpenAI's batch output
    types ``custom_id`` as a string; an integer id, such as a line number, as its digits)."""
    return item_id if isinstance(item_id, str) else str(item_id)


def request_parts(
    obj: Mapping[str, Any],
) -> tuple[str, Mapping[str, Any], dict[str, Any], set[str]]:
    """Split a request line into (url, body, the body as a plain line, unknown keys).

    The plain line has ``id`` (= ``custom_id``), ``prompt`` or ``messages``, and the body's
    sampling fields, so the rest of the reader treats it like any JSONL line.

    Raises:
        ValueError: not a valid request (method, url, custom_id, a missing or bad body,
            n); the message says what is valid.
    """
    custom_id = obj["custom_id"]
    if not isinstance(custom_id, str) or not custom_id:
        raise ValueError('"custom_id" must be a non-empty string')
    method = obj.get("method", "POST")
    if method != "POST":
        raise ValueError(f'"method" is {method!r}; batch requests are "POST"')
    url = obj.get("url")
    if url not in URLS:
        raise ValueError(f'"url" is {url!r}; llamabatch answers {" and ".join(URLS)}')
    if "body" not in obj:
        raise ValueError(
            f'has no "body": a {url} request needs one, a JSON object with the request'
        )
    body = obj["body"]
    if not isinstance(body, Mapping):
        raise ValueError('"body" must be a JSON object')
    if body.get("stream"):
        raise ValueError('"body"."stream" is true; batch replies are not streamed')
    prompt_key = _BODY_PROMPTS[url]
    if prompt_key not in body:
        raise ValueError(f'"body" of a {url} request needs "{prompt_key}"')
    refused = refused_arguments({k: v for k, v in body.items() if k not in _BODY_IGNORED})
    if refused:
        raise ValueError(
            f'"body" sets {", ".join(refused)}, which llamabatch cannot honour (as '
            "create_completions refuses it); leave it out"
        )
    line = {k: v for k, v in body.items() if k not in _BODY_IGNORED and k not in OFF}
    if "max_completion_tokens" in body and "max_tokens" not in body:
        line["max_tokens"] = body["max_completion_tokens"]
    if url == CHAT_URL and ("top_logprobs" in body or isinstance(body.get("logprobs"), bool)):
        line["logprobs"] = chat_request_logprobs(
            line.pop("logprobs", None), line.pop("top_logprobs", None)
        )
    line.pop("messages" if url == COMPLETIONS_URL else "prompt", None)
    line["id"] = custom_id
    unknown = {k for k in obj if k not in ("custom_id", "method", "url", "body")}
    return url, body, line, unknown


def _request_id() -> str:
    return uuid.uuid4().hex


def response_record(
    item_id: str | int,
    url: str,
    completion: Completion,
    model: str,
    text_of: TokenText | None = None,
    offset: int = 0,
) -> dict[str, Any]:
    """The output line of one completed (or failed) item, as the Batch API writes it;
    its ``logprobs`` are filled when the item has them and ``text_of`` (token ids ->
    text) is given, ``text_offset`` counted from ``offset`` (the binding's: the prompt's
    length; :func:`~llamabatch.responses.response`)."""
    if not completion.ok:
        return error_response(item_id, "item_failed", completion.error or "failed")
    chat = url == CHAT_URL
    body = response(completion, model=model, chat=chat, text_of=text_of, offset=offset)
    for key in ("choice_probs", "votes"):  # llamabatch's own, when asked for
        if getattr(completion, key) is not None:
            body[key] = getattr(completion, key)
    return {
        "id": f"batch_req_{_request_id()}",
        "custom_id": custom_id_of(item_id),
        "response": {"status_code": 200, "request_id": _request_id(), "body": body},
        "error": None,
    }


def error_response(item_id: str | int, code: str, message: str) -> dict[str, Any]:
    """The output line of an item that got no reply: ``response`` null, ``error`` set."""
    return {
        "id": f"batch_req_{_request_id()}",
        "custom_id": custom_id_of(item_id),
        "response": None,
        "error": {"code": code, "message": message},
    }
