""":class:`~llamabatch.SamplingParams` as llama-cpp-python's keyword arguments and as an
OpenAI request's fields, and ``create_completion``'s keyword arguments (and
lm-evaluation-harness's ``gen_kwargs``) back as :class:`~llamabatch.SamplingParams`.

Derived from the sampler chain's table (:data:`llamabatch.params.STAGES`): the fields of
the stages llama-cpp-python builds from its keywords are passed under their own names, so a
stage added later needs no code here; a stage of llamabatch's own (XTC) is not a keyword of
the binding's calls. A field set to other than its default that a call cannot honour is
refused by name, never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from ..errors import ParameterError
from ..params import PENALTY_FIELDS, STAGES, SamplingParams, as_int, as_real

_DEFAULT = SamplingParams()

#: The sampler chain's fields that llama-cpp-python takes as keywords of the same names
#: (``penalty_last_n`` is its ``Llama.last_n_tokens_size``): passed under these names to
#: ``create_completion`` and to a server.
CHAIN = tuple(
    dict.fromkeys(
        (
            *(name for name in PENALTY_FIELDS if name != "penalty_last_n"),
            *(name for stage in STAGES if stage.keyword for name in stage.fields),
        )
    )
)
#: What ``create_completion`` honours (a constraint as its ``grammar``; ``penalty_last_n``
#: as the ``Llama``'s ``last_n_tokens_size``), and a server request (``penalty_last_n`` as
#: ``repeat_last_n``).
COMPLETION_FIELDS = frozenset(
    CHAIN + ("seed", "penalty_last_n", "max_tokens", "stop", "grammar", "json_schema", "choices")
)
#: Fields that act only when labels are scored (``SamplingParams.scores_labels``).
_SCORING = ("score_choices", "choice_leading_space")

#: ``create_completion`` arguments without a field, accepted at the values that mean off.
_OFF: dict[str, tuple[Any, ...]] = {
    "suffix": (None,),
    "echo": (False,),
    "stream": (False,),
    "tfs_z": (1.0,),
    "mirostat_mode": (0,),
    "mirostat_tau": (5.0,),
    "mirostat_eta": (0.1,),
    "model": (None,),
    "stopping_criteria": (None,),
    "logits_processor": (None,),
    "logit_bias": (None, {}),
}
#: ``create_chat_completion``'s (and OpenAI's) tool-call arguments: no batch counterpart,
#: accepted when off (no tools: ``None`` or an empty list; a choice of ``"none"``).
CHAT_OFF: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
}
#: Every argument of the binding's calls (and OpenAI's request fields) that llamabatch
#: cannot honour, with its values that mean off.
OFF = {**_OFF, **CHAT_OFF}


def _is_off(name: str, value: object) -> bool:
    """True when ``value`` of :data:`OFF`'s ``name`` means off (so it changes nothing)."""
    return any(value is off or (off is not None and value == off) for off in OFF[name])


def refused_arguments(kwargs: Mapping[str, Any], names: Collection[str] = OFF) -> list[str]:
    """The keys of ``kwargs`` among ``names`` (of :data:`OFF`) set to other than off, in
    ``kwargs``' order: the one rule for ``create_*`` calls and OpenAI batch bodies, which
    refuse them by name."""
    return [k for k, v in kwargs.items() if k in names and k in OFF and not _is_off(k, v)]


def unsupported(sampling: SamplingParams, carried: Collection[str]) -> list[str]:
    """The fields of ``sampling`` set to other than their default that are not in
    ``carried``, in the dataclass's order (the scoring fields only when they act)."""
    inert = () if sampling.scores_labels else _SCORING
    return [
        f.name
        for f in dataclasses.fields(sampling)
        if f.name not in carried
        and f.name not in inert
        and getattr(sampling, f.name) != getattr(_DEFAULT, f.name)
    ]


def llama_settings(sampling: SamplingParams) -> dict[str, Any]:
    """The ``Llama`` attributes its sampler chain reads that no call takes."""
    return {"last_n_tokens_size": sampling.penalty_last_n}


def completion_kwargs(
    sampling: SamplingParams, max_tokens: int, grammar: Any, *, server: bool = False
) -> dict[str, Any]:
    """``create_completion``'s (and ``create_chat_completion``'s) keyword arguments: the
    chain, ``seed``, ``max_tokens`` (``sampling.max_tokens`` or ``max_tokens``), ``stop``
    and ``grammar`` (the compiled constraint, or ``None``); set :func:`llama_settings` on
    the ``Llama`` too. With ``server``, an OpenAI-compatible request's fields
    (llama-server's and llama-cpp-python's server's names): the same without those that
    are ``None``, ``grammar`` as GBNF text, plus ``repeat_last_n``.

    Raises:
        ValueError: a field the call (or a request) cannot carry (named).
    """
    refused = unsupported(sampling, COMPLETION_FIELDS)
    if refused:
        why = (
            "cannot be sent to a server of the pool (no request field carries it); leave it "
            "unset for --server, or run locally or with --ray"
            if server
            else "has no Llama.create_completion argument: leave it unset"
        )
        raise ValueError(f"{', '.join(refused)} {why}")
    kwargs = {name: getattr(sampling, name) for name in (*CHAIN, "seed")}
    kwargs.update(max_tokens=sampling.max_tokens or max_tokens, stop=list(sampling.stop) or None)
    if grammar is not None:
        kwargs["grammar"] = grammar
    if server:
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        kwargs["repeat_last_n"] = sampling.penalty_last_n
    return kwargs


def _max_tokens(value: object) -> int | None:
    """``create_completion``'s ``max_tokens`` as the field: ``None`` or <= 0 is ``None``
    (the generator's); an integer of any type or an integral float (``3.0``, which the
    binding honours) is that many tokens.

    Raises:
        ParameterError: anything else (a string, ``3.5``), named.
    """
    if value is None:
        return None
    number = as_int(value)
    if number is None and (real := as_real(value)) is not None and real.is_integer():
        number = int(real)
    if number is None:
        raise ParameterError(
            "max_tokens", value, "None, or an integer (<= 0: the generator's max_tokens)"
        )
    return number if number > 0 else None


def chat_request_logprobs(logprobs: object, top_logprobs: object) -> Any:
    """The ``logprobs`` field of a chat's OpenAI ``logprobs`` (true or false) and
    ``top_logprobs`` (N): ``top_logprobs`` when ``logprobs`` is true, else ``None``, as
    llama-cpp-python's chat handler passes them to ``create_completion``; the one rule
    of ``create_chat_completions`` and OpenAI batch chat bodies."""
    return top_logprobs if logprobs else None


def from_completion_kwargs(kwargs: Mapping[str, Any]) -> SamplingParams:
    """The :class:`~llamabatch.SamplingParams` of ``create_completion``'s keyword
    arguments (without ``prompt``): the chain, ``seed``, ``max_tokens`` (``None`` or
    <= 0: the generator's), ``stop``, ``logprobs`` and ``grammar`` as GBNF text.

    Raises:
        ValueError: naming every argument that cannot be honoured (an unknown one, one
            without a field set to other than off, a compiled ``LlamaGrammar``), or a
            value out of range.
    """
    values: dict[str, Any] = {}
    refused = []
    for name, value in kwargs.items():
        if name in _OFF:
            if not _is_off(name, value):
                refused.append(name)
        elif name == "grammar" and not (value is None or isinstance(value, str)):
            refused.append("grammar (give its GBNF text, not a LlamaGrammar)")
        elif name == "max_tokens":
            values[name] = _max_tokens(value)
        elif name in (*CHAIN, "seed", "stop", "logprobs", "grammar"):
            values[name] = value
        else:
            refused.append(name)
    if refused:
        raise ValueError(f"cannot honour {', '.join(refused)}: no SamplingParams field does it")
    return SamplingParams(**values)


#: lm-evaluation-harness's ``generate_until`` keys honoured by :func:`generation_sampling`.
GEN_KWARGS = (
    "until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p", "min_p", "seed",
)  # fmt: skip

#: Hugging Face's temperature when ``do_sample`` is true and none is given.
SAMPLE_TEMPERATURE = 1.0


def generation_sampling(gen_kwargs: Mapping[str, Any], max_gen_toks: int) -> SamplingParams:
    """The sampling of one lm-evaluation-harness ``generate_until`` request: greedy unless
    ``do_sample`` or a ``temperature`` > 0 (as the harness's ``hf`` and ``vllm`` models read
    them); only the stages of :data:`GEN_KWARGS`; ``max_gen_toks`` is ``max_tokens`` when
    ``gen_kwargs`` has none.

    Raises:
        ValueError: a key that cannot be honoured (named, with the keys that can), or a
            value out of range (``SamplingParams``' message).
    """
    if not isinstance(gen_kwargs, Mapping):
        raise ValueError(f"gen_kwargs is {type(gen_kwargs).__name__}; expected a dict")
    unknown = sorted(set(gen_kwargs) - set(GEN_KWARGS))
    if unknown:
        raise ValueError(
            f"gen_kwargs {', '.join(map(repr, unknown))} cannot be honoured by llamabatch; "
            f"valid keys are {', '.join(GEN_KWARGS)}"
        )
    until = gen_kwargs.get("until") or ()
    stop = (until,) if isinstance(until, str) else tuple(s for s in until if s)
    do_sample = gen_kwargs.get("do_sample")
    temperature = gen_kwargs.get("temperature")
    if do_sample is False or (do_sample is None and not temperature):
        temperature = 0.0
    elif temperature is None:
        temperature = SAMPLE_TEMPERATURE
    return SamplingParams(
        temperature=float(temperature),
        top_k=int(gen_kwargs.get("top_k") or 0),
        top_p=float(gen_kwargs.get("top_p") or 1.0),
        min_p=float(gen_kwargs.get("min_p") or 0.0),
        seed=gen_kwargs.get("seed"),
        max_tokens=int(gen_kwargs.get("max_gen_toks") or max_gen_toks),
        stop=stop,
    )
