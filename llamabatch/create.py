"""llama-cpp-python's ``create_completion`` / ``create_chat_completion`` over a list of
prompts in the generator's terms (:class:`BindingCall`: the items to complete, then the
response dicts of their completions; :meth:`~llamabatch.BatchGenerator.create_completions`
runs it): the binding's keyword arguments (through
:func:`~llamabatch.sampling_map.from_completion_kwargs`: refused by name when the batch
path cannot honour one) and defaults, plus ``n`` and ``model``; its response dicts
(:mod:`llamabatch.responses`). The ``Llama``'s own settings that its
``create_completion`` reads are the defaults: its penalty window
(``Llama(last_n_tokens_size=...)``, as ``penalty_last_n``) and, with ``seed=None``, the
seeds it derives from its own seed (:func:`derived_seeds`). Differences
(docs/embedding.md): ``max_tokens`` ``None`` or <= 0 is the generator's ``max_tokens``;
``grammar`` is GBNF text; the ``Llama``'s seed is left as it was (the binding moves it on
with each call)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .completion import Completion
from .engine.backend import Backend, Vocab
from .params import LLAMA_DEFAULT_SEED, SamplingParams
from .responses import response
from .sampling_map import CHAT_OFF, chat_request_logprobs, from_completion_kwargs, refused_arguments

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


def token_text(llm: Any, vocab: Vocab) -> Callable[[Sequence[int]], str]:
    """Token ids -> text as the binding shows them in logprobs (the ``Llama``'s
    ``detokenize``, bad bytes dropped; with no ``Llama``, the backend's ``vocab``)."""
    if llm is None:
        return vocab.detokenize
    return lambda ids: llm.detokenize(list(ids)).decode("utf-8", errors="ignore")


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
        offsets: per item, the ``text_offset`` base of a completion's logprobs (``None``:
            a chat, whose base is the completion's ``n_prompt_tokens``).
    """

    items: list[object]
    sampling: SamplingParams | list[SamplingParams]
    llm: Any
    model: str | None = None
    chat: bool = False
    offsets: list[int] | None = None

    def responses(self, done: Sequence[Completion], backend: Backend) -> list[dict[str, Any]]:
        """The response dict of each completion of :attr:`items`, in order (``backend``:
        the generator's, named when there is no ``Llama`` and no ``model``)."""
        name = self.model or getattr(self.llm, "model_path", None) or type(backend).__name__
        text_of = token_text(self.llm, backend.vocab)
        offsets = self.offsets if self.offsets is not None else [c.n_prompt_tokens for c in done]
        return [
            response(c, model=name, chat=self.chat, text_of=text_of, offset=offset)
            for c, offset in zip(done, offsets, strict=True)
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
    return BindingCall(prompts, per_prompt, llm, model, offsets=[_len(p) for p in prompts])


def _len(prompt: object) -> int:
    """The binding's ``text_offset`` base: ``len(prompt)`` (characters or token ids)."""
    return len(prompt) if isinstance(prompt, (str, Sequence)) else 0


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
