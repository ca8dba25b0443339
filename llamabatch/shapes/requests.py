"""What a request becomes in llamabatch's terms, for every path: llama-cpp-python's
``create_completion`` / ``create_chat_completion`` over a list of prompts
(:class:`BindingCall`), an OpenAI batch file's request line (:func:`request_parts`), and
an item sent to an OpenAI-compatible server (:class:`ServerRequest`). The sampling
fields of each are :mod:`llamabatch.shapes.sampling_map`'s.

The binding's calls: its keyword arguments (refused by name when the batch path cannot
honour one) and defaults, plus ``n`` and ``model``; the ``Llama``'s own settings that its
``create_completion`` reads are the defaults: its penalty window
(``Llama(last_n_tokens_size=...)``, as ``penalty_last_n``) and, with ``seed=None``, the
seeds it derives from its own seed (:func:`derived_seeds`). Differences
(docs/embedding.md): ``max_tokens`` ``None`` or <= 0 is the generator's ``max_tokens``;
``grammar`` is GBNF text; the ``Llama``'s seed is left as it was (the binding moves it on
with each call).

An OpenAI batch line (OpenAI's Batch API, also read by ``vllm run-batch``)::

    {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "...", "messages": [...], "max_tokens": 20, ...}}

``url`` is :data:`CHAT_URL` (``body.messages``) or :data:`COMPLETIONS_URL`
(``body.prompt``); the body's sampling fields are the item fields
(``max_completion_tokens`` is read as ``max_tokens``), ``model`` is ignored, a chat's
OpenAI ``logprobs: true`` with ``top_logprobs: N`` asks for ``N``, and a field the binding
has but llamabatch cannot honour set to other than off is refused by name, as
``create_completions`` refuses it.

A server request's sampling fields are ``completion_kwargs(..., server=True)``; a
constraint is sent as the GBNF ``grammar`` the local engine uses
(:func:`llamabatch.llamacpp.constraints.grammar_of`), which llama-server and
llama-cpp-python's server accept on both endpoints.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..completion import Completion
from ..engine.backend import Backend
from ..errors import BadItem
from ..items import is_messages, resolve_item
from ..params import LLAMA_DEFAULT_SEED, SamplingParams
from .responses import response, token_text
from .sampling_map import (
    CHAT_OFF,
    OFF,
    chat_request_logprobs,
    completion_kwargs,
    from_completion_kwargs,
    refused_arguments,
)

COMPLETIONS_URL = "/v1/completions"
CHAT_URL = "/v1/chat/completions"
#: The body key of each endpoint's prompt.
BODY_PROMPT_KEY = {CHAT_URL: "messages", COMPLETIONS_URL: "prompt"}

#: The chat format ``Llama`` uses for the GGUF's own template.
_GGUF_TEMPLATE = "chat_template.default"


def _sampling(kwargs: Mapping[str, Any], *, chat: bool) -> tuple[SamplingParams, Any, Any]:
    """The sampling params, ``model`` and (chat) ``response_format`` of a call's keywords."""
    kw = dict(kwargs)
    model, n = kw.pop("model", None), kw.pop("n", 1)
    response_format = None
    if chat:
        on = refused_arguments(kw, CHAT_OFF)
        for name in CHAT_OFF:
            kw.pop(name, None)
        if on:
            raise ValueError(
                f"cannot honour {', '.join(on)}: create_chat_completions has no tool calls; "
                "leave it None (tools: or an empty list)"
            )
        response_format = kw.pop("response_format", None)
        kw["logprobs"] = chat_request_logprobs(
            kw.pop("logprobs", None), kw.pop("top_logprobs", None)
        )
        kw.setdefault("temperature", 0.2)
    else:
        kw.setdefault("max_tokens", 16)
    return dataclasses.replace(from_completion_kwargs(kw), n=n), model, response_format


def derived_seeds(llama_seed: int, count: int, n: int = 1) -> list[int]:
    """The seeds of ``count`` calls in a row of ``Llama.create_completion(seed=None)`` on a
    ``Llama`` whose seed is ``llama_seed``: each call sets
    ``random.Random(previous).randint(0, 2**32)`` (llama-cpp-python 0.3.x
    ``_create_completion``), the first from ``llama_seed``. Each is taken modulo
    ``LLAMA_DEFAULT_SEED - (n - 1)``, so that reply ``j``'s ``seed + j`` stays a
    reproducible seed (the binding's own ``2**32 - 1`` would draw a random one)."""
    seeds, seed = [], llama_seed
    for _ in range(count):
        seed = random.Random(seed).randint(0, 2**32)
        seeds.append(seed % (LLAMA_DEFAULT_SEED - (n - 1)))
    return seeds


def _per_prompt(
    llm: Any, sampling: SamplingParams, count: int
) -> SamplingParams | list[SamplingParams]:
    """``sampling`` with the ``Llama``'s defaults: ``penalty_last_n`` its
    ``last_n_tokens_size``, and without a ``seed``, one per prompt from
    :func:`derived_seeds` (so a reply does not depend on what it is batched with); with
    no ``Llama`` (a backend), ``sampling`` as it is."""
    if llm is None:
        return sampling
    window = getattr(llm, "last_n_tokens_size", sampling.penalty_last_n)
    sampling = dataclasses.replace(sampling, penalty_last_n=window)
    if sampling.seed is not None:
        return sampling
    seeds = derived_seeds(getattr(llm, "_seed", LLAMA_DEFAULT_SEED), count, sampling.n)
    return [dataclasses.replace(sampling, seed=s) for s in seeds]


@dataclass(frozen=True, slots=True)
class BindingCall:
    """One ``create_completions`` / ``create_chat_completions`` call in the generator's
    terms: the ``items`` to complete with their ``sampling``, and how the completions are
    written back as the binding's response dicts (:meth:`responses`).

    Attributes:
        items: what ``complete_many`` takes, one per prompt or conversation.
        sampling: their sampling params (one per item where the ``Llama`` seeds each).
        llm: the ``Llama``, or ``None`` (a backend without one).
        model: the call's ``model``, or ``None``.
        chat: a chat call.
    """

    items: list[object]
    sampling: SamplingParams | list[SamplingParams]
    llm: Any
    model: str | None = None
    chat: bool = False

    def responses(self, done: Sequence[Completion], backend: Backend) -> list[dict[str, Any]]:
        """The response dict of each completion of :attr:`items`, in order (``backend``:
        the generator's, named when there is no ``Llama`` and no ``model``)."""
        name = self.model or getattr(self.llm, "model_path", None) or type(backend).__name__
        text_of = token_text(self.llm, backend.vocab)
        return [
            response(c, model=name, chat=self.chat, text_of=text_of, prompt=item)
            for c, item in zip(done, self.items, strict=True)
        ]


def _as_list(values: Iterable[object], what: str) -> list[object]:
    if isinstance(values, (str, bytes, Mapping)):
        raise TypeError(f"{what} is one {type(values).__name__}; give a list of them")
    return list(values)


def completion_call(llm: Any, prompts: Iterable[object], kwargs: Mapping[str, Any]) -> BindingCall:
    """:meth:`BatchGenerator.create_completions`' call (see the module's rules).

    Raises:
        ValueError: a keyword that cannot be honoured (named) or a bad value.
        TypeError: ``prompts`` is one prompt, not a list.
    """
    prompts = _as_list(prompts, "prompts")
    sampling, model, _ = _sampling(kwargs, chat=False)
    per_prompt = _per_prompt(llm, sampling, len(prompts))
    return BindingCall(prompts, per_prompt, llm, model)


def chat_call(llm: Any, conversations: Iterable[object], kwargs: Mapping[str, Any]) -> BindingCall:
    """:meth:`BatchGenerator.create_chat_completions`' call.

    Raises:
        ValueError: as :func:`completion_call`; the ``Llama`` was given another
            ``chat_format`` or ``chat_handler`` than its GGUF template.
        TypeError: ``conversations`` is one conversation, not a list of them.
    """
    conversations = _as_list(conversations, "messages_list")
    if conversations and isinstance(conversations[0], Mapping):
        raise TypeError("messages_list is one conversation; give a list of them, e.g. [messages]")
    sampling, model, response_format = _sampling(kwargs, chat=True)
    if llm is not None:
        fmt, handler = getattr(llm, "chat_format", None), getattr(llm, "chat_handler", None)
        if handler is not None or fmt not in (None, _GGUF_TEMPLATE):
            raise ValueError(
                f"this Llama formats chats with chat_format={fmt!r}"
                f"{' and a chat_handler' if handler is not None else ''}; "
                "create_chat_completions formats them with the model's own template "
                "(GGUF tokenizer.chat_template): load the Llama without chat_format / "
                "chat_handler, or give ready prompts to create_completions"
            )
    extra = {} if response_format is None else {"response_format": response_format}
    items: list[object] = [{"messages": m, **extra} for m in conversations]
    return BindingCall(items, _per_prompt(llm, sampling, len(items)), llm, model, chat=True)


#: Batch body keys accepted without effect.
_BODY_IGNORED = frozenset({"model", "stream", "user", "max_completion_tokens"})


def is_request(obj: Mapping[str, Any]) -> bool:
    """True for an OpenAI batch request line: it has a ``custom_id`` (a line without
    ``body`` is a request that lacks it, not a plain line)."""
    return "custom_id" in obj


def request_parts(obj: Mapping[str, Any]) -> tuple[str, dict[str, Any], set[str]]:
    """Split an OpenAI batch request line into (url, the body as a plain line, unknown
    keys).

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
    if url not in BODY_PROMPT_KEY:
        raise ValueError(f'"url" is {url!r}; llamabatch answers {" and ".join(BODY_PROMPT_KEY)}')
    if "body" not in obj:
        raise ValueError(
            f'has no "body": a {url} request needs one, a JSON object with the request'
        )
    body = obj["body"]
    if not isinstance(body, Mapping):
        raise ValueError('"body" must be a JSON object')
    if body.get("stream"):
        raise ValueError('"body"."stream" is true; batch replies are not streamed')
    prompt_key = BODY_PROMPT_KEY[url]
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
    return url, line, unknown


_DEFAULT = SamplingParams()


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """One item's request to a server, ready to send: the endpoint path, the JSON body
    (without ``model``) and the item's resolved sampling params (what its reply is checked
    against)."""

    endpoint: str
    body: dict[str, Any]
    sampling: SamplingParams = _DEFAULT


def _prompt(value: object) -> tuple[str, object]:
    """(endpoint, JSON value) of a prompt or a list of messages."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadItem(f"prompt is not valid UTF-8: {exc}") from None
    if isinstance(value, str):
        return COMPLETIONS_URL, value
    if is_messages(value):
        return CHAT_URL, [dict(m) for m in cast("Sequence[Mapping[str, Any]]", value)]
    if (
        isinstance(value, Sequence)
        and value
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    ):
        return COMPLETIONS_URL, list(value)  # llama-server reads token ids
    raise BadItem(
        f"prompt is {type(value).__name__}: expected a str, UTF-8 bytes, a "
        "non-empty list of token ids or a non-empty list of chat messages"
    )


def build_request(item: object, sampling: SamplingParams, max_tokens: int) -> ServerRequest:
    """The request of one item (a prompt, messages or a mapping with per-item fields,
    :func:`llamabatch.items.resolve_item`) with the generator's ``sampling`` under the
    item's fields; the item's ``max_tokens`` wins over ``max_tokens``.

    Raises:
        BadItem: the item is not a prompt, messages or a mapping of known fields, a field
            is bad, a ``json_schema`` the converter refuses, or a field set that a server
            request cannot carry (each named).
    """
    from ..llamacpp.constraints import grammar_of  # pure; `import llamabatch` loads no llamacpp

    try:
        resolved = resolve_item(item, sampling)
        fields = completion_kwargs(
            resolved.sampling, max_tokens, grammar_of(resolved.sampling), server=True
        )
    except ValueError as exc:  # GrammarError too
        raise BadItem(str(exc)) from None
    prompt = resolved.messages if resolved.messages is not None else resolved.prompt
    endpoint, value = _prompt(prompt)
    body = {BODY_PROMPT_KEY[endpoint]: value, "stream": False, **fields}
    return ServerRequest(endpoint, body, resolved.sampling)
