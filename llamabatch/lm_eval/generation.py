"""lm-evaluation-harness's ``generate_until`` arguments as a :class:`~llamabatch.SamplingParams`:
greedy unless ``do_sample`` or a ``temperature`` > 0 (as the harness's ``hf`` and ``vllm``
models read them); sampling uses only the stages named; other keys are refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..params import SamplingParams

#: The ``gen_kwargs`` keys honoured.
GEN_KWARGS = (
    "until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p", "min_p", "seed",
)  # fmt: skip

#: Hugging Face's temperature when ``do_sample`` is true and none is given.
SAMPLE_TEMPERATURE = 1.0


def generation_sampling(gen_kwargs: Mapping[str, Any], max_gen_toks: int) -> SamplingParams:
    """The sampling of one ``generate_until`` request.

    Args:
        gen_kwargs: the request's generation arguments (see the module doc).
        max_gen_toks: ``max_tokens`` when ``gen_kwargs`` has no ``max_gen_toks``.

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
    stop = [until] if isinstance(until, str) else [s for s in until if s]
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
        stop=tuple(s for s in stop if s),
    )
