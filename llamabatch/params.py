"""Sampling and batching parameters: frozen dataclasses validated on construction.

Defaults and names follow llama-cpp-python's ``Llama.create_completion`` (0.3.x):
temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, typical_p 1.0, repeat_penalty 1.0,
frequency_penalty 0, presence_penalty 0, and ``Llama(last_n_tokens_size=64)``.
Every invalid value raises ``ValueError`` naming the parameter and the valid range,
before any model work.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Literal, cast

from .errors import ParameterError

#: ``LLAMA_DEFAULT_SEED`` in llama.h: the dist sampler then draws a random seed.
LLAMA_DEFAULT_SEED = 0xFFFFFFFF

#: The largest reproducible seed: every uint32 but ``LLAMA_DEFAULT_SEED``.
MAX_SEED = LLAMA_DEFAULT_SEED - 1

#: The default look-ahead is at least this many items (see :func:`default_lookahead`).
MIN_DEFAULT_LOOKAHEAD = 16

#: Items per slot that the default look-ahead lets run ahead of the oldest unfinished one.
LOOKAHEAD_PER_SLOT = 4

#: Failures of the batch path in a row after which batching is off (``max_batch_failures``).
MAX_BATCH_FAILURES = 3

#: Most KV cache tokens per sequence by default (``n_ctx_seq=None``: at most the model's).
DEFAULT_N_CTX_SEQ = 4096
#: Sampling temperature of the command line's items (``llamabatch complete``, ``tune``,
#: ``bench --prompts``): low, taggers want the likeliest label.
DEFAULT_TEMPERATURE = 0.1


def _check(ok: bool, name: str, value: object, valid: str) -> None:
    if not ok:
        raise ParameterError(name, value, valid)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_int(value: object) -> int | None:
    """``value`` as a Python ``int`` when it is an integer of any type (``numpy.int64``:
    ``operator.index``), else ``None``; a ``bool`` is not an integer here."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def as_real(value: object) -> float | None:
    """``value`` as a Python ``float`` when it is a real number of any type
    (``numbers.Real``: ``numpy.float32`` too), else ``None``; a ``bool`` is not one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


#: Fields holding integers and real numbers: other numeric types become Python's.
_INT_FIELDS = ("top_k", "seed", "penalty_last_n", "max_tokens", "logprobs", "n")
_REAL_FIELDS = (
    "temperature",
    "top_p",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "xtc_probability",
    "xtc_threshold",
)


def _normalize_numbers(p: SamplingParams) -> None:
    """Integers of any type (``numpy.int64``) become ``int``, real numbers of any type
    (``numpy.float32``) become ``float``; other values are left for the range checks."""
    for name in _INT_FIELDS:
        value = as_int(getattr(p, name))
        if value is not None:
            object.__setattr__(p, name, value)
    for name in _REAL_FIELDS:
        real = as_real(getattr(p, name))
        if real is not None:
            object.__setattr__(p, name, real)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How each sequence picks its next token.

    The chain is llama-cpp-python's (``Llama._init_sampler``): penalties(last_n
    ``penalty_last_n``) → top_k → typical_p → top_p → min_p → (xtc) → temperature →
    dist(seed); ``temperature == 0`` picks greedily. The same chain samples every item,
    in a batch and alone (:data:`llamabatch.llamacpp.sampler.STAGES`).

    What the reply may be and where it ends (each honoured the same way in a batch and
    alone; names follow llama-cpp-python's ``create_completion`` and vLLM):

    Attributes:
        temperature: the logits are divided by it, >= 0; 0 picks greedily (the command
            line's default is 0.1).
        top_k: keep the ``top_k`` likeliest tokens; 0 = off.
        top_p: nucleus sampling: the likeliest tokens up to this probability mass, (0, 1].
        min_p: drop tokens below ``min_p`` times the likeliest one's probability, [0, 1].
        typical_p: locally typical sampling mass, (0, 1]; 1 = off.
        repeat_penalty: factor on the logits of tokens among the last ``penalty_last_n``
            generated, > 0; 1 = off.
        frequency_penalty: subtracted per earlier occurrence of a token; 0 = off.
        presence_penalty: subtracted once from a token that occurred; 0 = off.
        penalty_last_n: how many generated tokens the penalties look back on.
        xtc_probability: XTC ("exclude top choices", llama.cpp's
            ``llama_sampler_init_xtc``): the chance per token, [0, 1], that every token
            above ``xtc_threshold`` but the least likely of them is removed; 0 = off (no
            stage). It runs after min_p, before temperature, as in llama.cpp's default
            order; ``Llama.create_completion`` has no such argument.
        xtc_threshold: XTC's probability threshold, [0, 1]; above 0.5 XTC does nothing.
        max_tokens: most reply tokens of this item; ``None`` = the generator's
            ``max_tokens``.
        stop: strings that end the reply (one ``str`` or a sequence); the reply is cut
            before the first one found, ``finish_reason`` ``"stop"``, as
            ``Llama.create_completion(stop=...)`` does. A stop string may span tokens.
        stop_token_ids: token ids that end the reply besides the end-of-generation ones
            (the id itself is not part of the reply).
        grammar: GBNF text (llama.cpp ``grammars/README.md``) with a ``root`` rule; a
            grammar stage per sequence, after penalties as in ``Llama._init_sampler``.
        json_schema: a JSON schema (a dict or its JSON text), compiled to GBNF with
            llama-cpp-python's ``json_schema_to_gbnf``; the reply parses as JSON.
        choices: the reply is exactly one of these strings (a tagger's labels; a list,
            never one ``str``, which would be read as one label). A reply
            that ``max_tokens`` cuts before it is one of them is not a fragment with
            ``finish_reason`` ``"length"`` but the item's error (``"error"``, saying to
            raise ``max_tokens``); ``max_tokens`` is neither raised nor checked up front,
            since how many tokens the model takes to spell a choice is known only as it
            does (token boundaries under a grammar need not be the tokenizer's). A
            choice holding a NUL character (U+0000) is the item's error: no token can
            produce it.
        logprobs: top-N log-probabilities of each reply token on ``Completion.logprobs``
            (0 = only the chosen token's), ``None`` = off.
        seed: the dist sampler's seed, an integer in [0, 2**32 - 2] (the same seed and
            prompt give the same reply); ``None`` draws a random seed per item.
            ``2**32 - 1`` is refused: it is llama.h's ``LLAMA_DEFAULT_SEED``, which tells
            llama.cpp to draw a random seed, so it could never repeat a reply.
        n: replies drawn for the prompt (OpenAI's and vLLM's ``n``), >= 1; a prompt of
            ``min_copy_tokens`` or more is prefilled once and copied. Reply ``j`` uses seed
            ``seed + j``; they are on ``Completion.samples``, and ``Completion.text`` is
            reply 0.
        score_choices: with ``choices``, score every label instead of generating:
            ``Completion.choice_logprobs`` (log P(label | prompt), summed over the
            label's tokens), ``Completion.choice_probs`` (normalised over the labels) and
            ``text`` the likeliest label (:mod:`llamabatch.engine.features.labels`).
        choice_leading_space: with ``score_choices``, a label also counts as written
            with one leading space (``" bug"`` for ``"bug"``); the probabilities of the
            two continuations are summed (a form that cannot move the sum by more than
            :data:`~llamabatch.engine.features.labels.SKIP_NATS` is left unfinished). False
            scores each label as written only.
        score_prompt: score the prompt's own tokens instead of generating:
            ``Completion.prompt_logprobs`` holds log P(token | the tokens before it) for
            each prompt token after the first (what a server's ``echo`` with
            ``logprobs`` gives; a text's log-likelihood). No reply; the prompt needs two
            tokens at least.

    At most one of ``grammar``, ``json_schema``, ``choices`` is set. ``score_choices``
    acts only with ``choices`` (without them the item samples a reply, so that a job's
    ``--score-choices`` applies to the lines that carry labels), and then needs
    ``n == 1`` (scores are deterministic: one set per prompt). ``score_prompt`` needs
    ``n == 1`` and none of grammar / json_schema / choices (there is no reply to
    constrain).

    Raises:
        ValueError: a parameter outside its range or of the wrong type (named in the
            message), or more than one of grammar / json_schema / choices.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    penalty_last_n: int = 64
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    grammar: str | None = None
    json_schema: Mapping[str, object] | str | None = None
    choices: tuple[str, ...] | None = None
    logprobs: int | None = None
    n: int = 1
    score_choices: bool = False
    choice_leading_space: bool = True
    score_prompt: bool = False

    def __post_init__(self) -> None:
        _normalize_numbers(self)
        _normalize_reply_fields(self)
        _check_samples_and_scores(self)
        _check(
            _is_real(self.temperature) and self.temperature >= 0,
            "temperature",
            self.temperature,
            "a finite number >= 0 (0 = greedy)",
        )
        _check(
            _is_int(self.top_k) and self.top_k >= 0,
            "top_k",
            self.top_k,
            "an integer >= 0 (0 = off)",
        )
        _check(_is_real(self.top_p) and 0 < self.top_p <= 1, "top_p", self.top_p, "(0, 1]")
        _check(_is_real(self.min_p) and 0 <= self.min_p <= 1, "min_p", self.min_p, "[0, 1]")
        _check(
            _is_real(self.typical_p) and 0 < self.typical_p <= 1,
            "typical_p",
            self.typical_p,
            "(0, 1]",
        )
        _check(
            _is_real(self.repeat_penalty) and self.repeat_penalty > 0,
            "repeat_penalty",
            self.repeat_penalty,
            "a finite number > 0 (1 = off)",
        )
        _check(
            _is_real(self.frequency_penalty),
            "frequency_penalty",
            self.frequency_penalty,
            "a finite number (0 = off)",
        )
        _check(
            _is_real(self.presence_penalty),
            "presence_penalty",
            self.presence_penalty,
            "a finite number (0 = off)",
        )
        for name in ("xtc_probability", "xtc_threshold"):
            value = getattr(self, name)
            _check(_is_real(value) and 0 <= value <= 1, name, value, "[0, 1]")
        if self.seed == LLAMA_DEFAULT_SEED and _is_int(self.seed):
            raise ParameterError(
                "seed",
                self.seed,
                f"None (a random seed) or an integer in [0, {MAX_SEED}] (2**32 - 2); "
                f"{self.seed} is llama.cpp's LLAMA_DEFAULT_SEED, which makes the dist "
                "sampler draw a random seed, so replies would not repeat",
            )
        _check(
            self.seed is None or (_is_int(self.seed) and 0 <= self.seed <= MAX_SEED),
            "seed",
            self.seed,
            f"None (a random seed) or an integer in [0, {MAX_SEED}] (2**32 - 2)",
        )
        _check(
            _is_int(self.penalty_last_n) and self.penalty_last_n >= 0,
            "penalty_last_n",
            self.penalty_last_n,
            "an integer >= 0",
        )
        _check(
            self.max_tokens is None or (_is_int(self.max_tokens) and self.max_tokens >= 1),
            "max_tokens",
            self.max_tokens,
            "None (the generator's max_tokens) or an integer >= 1",
        )
        _check(
            self.logprobs is None or (_is_int(self.logprobs) and 0 <= self.logprobs <= 20),
            "logprobs",
            self.logprobs,
            "None or an integer in [0, 20] (OpenAI's limit)",
        )

    def __hash__(self) -> int:  # json_schema may be a dict: hash its canonical JSON text
        return hash(
            tuple(
                json.dumps(v, sort_keys=True) if isinstance(v, Mapping) else v
                for v in (getattr(self, f.name) for f in fields(self))
            )
        )

    @property
    def constraint(self) -> str | None:
        """Which of ``grammar`` / ``json_schema`` / ``choices`` is set, or ``None``."""
        for name in ("grammar", "json_schema", "choices"):
            if getattr(self, name) is not None:
                return name
        return None

    @property
    def scores_labels(self) -> bool:
        """True when the item's labels are scored (``score_choices`` with ``choices``)."""
        return self.score_choices and self.choices is not None

    @property
    def is_greedy(self) -> bool:
        """True when the chain is a plain argmax (temperature 0)."""
        return self.temperature == 0

    @property
    def effective_seed(self) -> int:
        """The seed given to the dist sampler: ``seed`` or ``LLAMA_DEFAULT_SEED``."""
        return LLAMA_DEFAULT_SEED if self.seed is None else self.seed


def _str_tuple(name: str, value: object, *, allow_empty: bool) -> tuple[str, ...]:
    """``value`` as a tuple of non-empty strings; one ``str`` is one string (as
    llama-cpp-python's ``stop``), never its characters, where ``allow_empty`` (``stop``);
    else (``choices``, a list of labels) one ``str`` is refused: ``"bug,billing"`` would
    be one label."""
    if isinstance(value, str):
        if not allow_empty:
            raise ValueError(
                f"{name}={value!r} is one string: give a list of strings, e.g. {[value]!r}"
            )
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name}={value!r} is not valid: give a string or a list of strings")
    if any(v == "" for v in value):
        raise ValueError(f"{name}={value!r} holds an empty string; every entry needs text")
    if not value and not allow_empty:
        raise ValueError(f"{name}=[] is not valid: give at least one string (or None)")
    return tuple(value)


def _normalize_reply_fields(p: SamplingParams) -> None:
    """Normalize and check ``stop``, ``stop_token_ids``, ``grammar``, ``json_schema``,
    ``choices`` (sequences become tuples, so the dataclass stays frozen and hashable)."""
    stop = () if p.stop is None else _str_tuple("stop", p.stop, allow_empty=True)
    object.__setattr__(p, "stop", stop)
    ids: object = p.stop_token_ids
    if isinstance(ids, (list, tuple)):
        ids = [t if (i := as_int(t)) is None else i for t in ids]
    if not isinstance(ids, (list, tuple)) or not all(_is_int(t) and t >= 0 for t in ids):
        raise ValueError(
            f"stop_token_ids={ids!r} is not valid: give a list of token ids (integers >= 0)"
        )
    object.__setattr__(p, "stop_token_ids", tuple(ids))
    if p.grammar is not None and (not isinstance(p.grammar, str) or not p.grammar.strip()):
        raise ValueError(
            f"grammar={p.grammar!r} is not valid: give GBNF text (with a 'root' rule) or None"
        )
    schema = p.json_schema
    if isinstance(schema, str):
        try:
            json.loads(schema)
        except ValueError as exc:
            raise ValueError(f"json_schema is not valid JSON: {exc}") from None
    elif schema is not None and not isinstance(schema, Mapping):
        raise ValueError(
            f"json_schema is {type(schema).__name__}: give a dict, its JSON text, or None"
        )
    if p.choices is not None:
        object.__setattr__(p, "choices", _str_tuple("choices", p.choices, allow_empty=False))
    given = [n for n in ("grammar", "json_schema", "choices") if getattr(p, n) is not None]
    if len(given) > 1:
        raise ValueError(
            f"{' and '.join(given)} are both set: give at most one of grammar, json_schema, choices"
        )


def _check_samples_and_scores(p: SamplingParams) -> None:
    """Check ``n``, ``score_choices``, ``choice_leading_space`` and ``score_prompt`` (and
    ``seed + n - 1``, the seed of the last reply, which must stay below
    ``LLAMA_DEFAULT_SEED``: that value asks llama.cpp for a random seed)."""
    _check(_is_int(p.n) and 1 <= p.n <= 1024, "n", p.n, "an integer in [1, 1024]")
    _check(
        isinstance(p.score_choices, bool),
        "score_choices",
        p.score_choices,
        "True or False",
    )
    _check(
        isinstance(p.choice_leading_space, bool),
        "choice_leading_space",
        p.choice_leading_space,
        "True or False",
    )
    if p.scores_labels and p.n != 1:
        raise ValueError(
            f"n={p.n} with score_choices=True: label scores are deterministic, give n=1 "
            "(or score_choices=False to draw n constrained replies and count votes)"
        )
    _check(isinstance(p.score_prompt, bool), "score_prompt", p.score_prompt, "True or False")
    if p.score_prompt and (p.n != 1 or p.constraint is not None):
        given = f"n={p.n}" if p.n != 1 else f"{p.constraint} is set"
        raise ValueError(
            f"score_prompt=True with {given}: scoring the prompt generates no reply, so it "
            "takes n=1 and none of grammar, json_schema, choices"
        )
    if p.seed is not None and p.n > 1 and p.seed + p.n - 1 >= LLAMA_DEFAULT_SEED:
        raise ValueError(
            f"seed={p.seed} with n={p.n}: reply j uses seed + j, which must stay below "
            f"{LLAMA_DEFAULT_SEED} (LLAMA_DEFAULT_SEED asks for a random seed)"
        )


#: ``min_keep`` of typical/top_p/min_p in ``Llama._init_sampler`` (``max(1, n_probs=0)``).
MIN_KEEP = 1


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of the sampled chain (``temperature > 0``), a row of :data:`STAGES`.

    Attributes:
        init: the stage's ``llama_sampler_init_*`` symbol, as ``_ffi`` resolves it
            (``"top_k"`` is ``llama_sampler_init_top_k``).
        fields: the :class:`~llamabatch.SamplingParams` fields it takes, in the init
            function's order; then ``min_keep`` (:data:`MIN_KEEP`) where ``min_keep``, then
            the item's seed where ``seed``.
        keyword: llama-cpp-python's ``Llama._init_sampler`` builds the stage from its
            ``create_completion`` keywords of the same names (False: a stage of ours,
            refused where only the binding's arguments are passed on).
        acts: the stage is built only when this holds (``None``: always; a stage the
            binding lacks is left out at its off value, so the chain stays the binding's).
    """

    init: str
    fields: tuple[str, ...]
    min_keep: bool = False
    seed: bool = False
    keyword: bool = True
    acts: Callable[[SamplingParams], bool] | None = None

    def args(self, params: SamplingParams) -> tuple[object, ...]:
        """The init function's arguments for ``params``."""
        values: list[object] = [getattr(params, name) for name in self.fields]
        if self.min_keep:
            values.append(MIN_KEEP)
        if self.seed:
            values.append(params.effective_seed)
        return tuple(values)

    def is_built(self, params: SamplingParams) -> bool:
        """True when ``params``' chain has this stage."""
        return self.acts is None or self.acts(params)


#: The sampled chain after penalties (and a grammar), in order: llama-cpp-python's
#: ``Llama._init_sampler`` (0.3.x), with XTC where llama.cpp's default order has it
#: (``common/sampling.cpp``: min_p, xtc, temperature). ``temperature == 0`` is greedy
#: instead. Adding a parameter is a field of ``SamplingParams`` and a row here.
STAGES = (
    Stage("top_k", ("top_k",)),
    Stage("typical", ("typical_p",), min_keep=True),
    Stage("top_p", ("top_p",), min_keep=True),
    Stage("min_p", ("min_p",), min_keep=True),
    Stage(
        "xtc",
        ("xtc_probability", "xtc_threshold"),
        min_keep=True,
        seed=True,
        keyword=False,
        acts=lambda p: p.xtc_probability > 0,
    ),
    Stage("temp", ("temperature",)),
    Stage("dist", (), seed=True),
)

#: The penalties stage's fields (``llama_sampler_init_penalties``, n_vocab first where the
#: binding takes it); the binding reads ``penalty_last_n`` from ``Llama.last_n_tokens_size``.
PENALTY_FIELDS = ("penalty_last_n", "repeat_penalty", "frequency_penalty", "presence_penalty")

#: ``BatchConfig(slots=AUTO_SLOTS)``: the most slots whose KV cache fits the free memory
#: of the device (:func:`~llamabatch.engine.auto_slots.choose_slots`).
AUTO_SLOTS = "auto"


def default_lookahead(slots: int) -> int:
    """The default look-ahead: the largest multiple of ``slots`` that is <= max(16, 4 *
    slots) (16 for 1, 2 and 4 slots, 15 for 3, 32 for 8): whole pages, and four slots'
    worth keeps slots busy while a long reply runs (docs/engine.md)."""
    limit = max(MIN_DEFAULT_LOOKAHEAD, LOOKAHEAD_PER_SLOT * slots)
    return max(slots, limit - limit % slots)


#: BatchConfig's integer fields: integers of any type (``numpy.int64``) become ``int``.
_CONFIG_INT_FIELDS = (
    "slots",
    "n_ctx_seq",
    "n_batch",
    "max_tokens",
    "lookahead",
    "min_copy_tokens",
    "cache_ram_mib",
    "max_batch_failures",
)


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """A run of the slot engine: :class:`~llamabatch.BatchGenerator`'s keyword arguments
    as one value, checked once (each field's meaning is there). The command line, Ray
    (:class:`~llamabatch.ray.ProcessorConfig`) and ``tune`` build one and pass it
    (:meth:`~llamabatch.BatchGenerator.from_config`).

    ``n_ctx_seq`` ``None`` is ``min(4096, n_ctx)`` of the model, set by the generator;
    ``slots`` ``"auto"`` is chosen by the generator from the free memory of the device
    (:func:`~llamabatch.engine.auto_slots.choose_slots`); ``lookahead`` ``None`` is
    :func:`default_lookahead`, set here once ``slots`` is a number.

    Raises:
        ValueError: a value outside its range (:class:`~llamabatch.errors.ParameterError`,
            named as the field).
    """

    slots: int | Literal["auto"] = 4
    n_ctx_seq: int | None = None
    n_batch: int = 512
    max_tokens: int = 200
    sampling: SamplingParams = SamplingParams()
    lookahead: int | None = None
    min_copy_tokens: int = 32
    cache_ram_mib: int = 1024
    max_batch_failures: int = MAX_BATCH_FAILURES
    backend_sampling: bool | None = None
    check_device: bool | None = None

    def __post_init__(self) -> None:
        for name in _CONFIG_INT_FIELDS:  # numpy.int64 and other integer types become int
            value = as_int(getattr(self, name))
            if value is not None:
                object.__setattr__(self, name, value)
        auto = isinstance(self.slots, str) and self.slots == AUTO_SLOTS
        for name, low, valid in (
            ("slots", 1, "1 = every item alone; the most is llama.cpp's, checked with the model"),
            ("n_ctx_seq", 1, "tokens per sequence"),
            ("n_batch", 1, "tokens per llama_decode"),
            ("max_tokens", 1, ""),
            ("min_copy_tokens", 1, "prompt tokens a cache copy must save"),
            ("cache_ram_mib", 0, "MiB; 0 keeps no state in host memory"),
            ("max_batch_failures", 1, "batch failures in a row before batching is off"),
        ):
            value = getattr(self, name)
            if (name == "n_ctx_seq" and value is None) or (name == "slots" and auto):
                continue
            _check(
                _is_int(value) and value >= low,
                name,
                value,
                f"an integer >= {low}"
                + (f" ({valid})" if valid else "")
                + (' or "auto"' if name == "slots" else ""),
            )
        if not isinstance(self.sampling, SamplingParams):
            raise ValueError(
                f"sampling is {type(self.sampling).__name__}; expected a llamabatch.SamplingParams"
            )
        _check(
            self.backend_sampling is None or isinstance(self.backend_sampling, bool),
            "backend_sampling",
            self.backend_sampling,
            "True, False or None (off)",
        )
        _check(
            self.check_device is None or isinstance(self.check_device, bool),
            "check_device",
            self.check_device,
            "True, False or None (on a GPU)",
        )
        if auto:  # the generator chooses slots, then lookahead is set or checked
            return
        slots = cast(int, self.slots)
        lookahead = default_lookahead(slots) if self.lookahead is None else self.lookahead
        object.__setattr__(self, "lookahead", lookahead)
        _check(
            _is_int(lookahead) and lookahead >= 1 and lookahead % slots == 0,
            "lookahead",
            lookahead,
            f"a positive multiple of slots={self.slots}",
        )
