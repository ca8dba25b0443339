""":class:`LlamaBatchLM`: lm-evaluation-harness's ``LM`` on a GGUF model, registered as
``llamabatch`` (docs/lm-eval.md). ``loglikelihood``: a context's continuations are one
label-scoring item (exact, no leading-space forms; the context's trailing whitespace moved
into the continuation, :func:`move_trailing_whitespace`); ``loglikelihood_rolling``: the
harness's rolling windows, each scored with ``score_prompt``; ``generate_until``: one
item per request (:mod:`.generation`). A failed item raises ``ValueError`` naming its
request: the harness has no place for one failed request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError as exc:  # pragma: no cover - the eval extra is missing
    raise ImportError(
        f"llamabatch.lm_eval needs lm-evaluation-harness: pip install 'llamabatch[eval]' ({exc})"
    ) from exc

from tqdm import tqdm

from ..completion import Completion
from ..generator import BatchGenerator
from ..model import DEFAULT_N_GPU_LAYERS
from ..params import SamplingParams
from ..shapes.sampling_map import generation_sampling

#: The model's name in lm-evaluation-harness's registry (``--model llamabatch``).
MODEL_NAME = "llamabatch"

#: Slots when neither ``slots`` nor a ``batch_size`` > 1 is given.
DEFAULT_SLOTS = 4

#: What every score item shares: one token of room (it samples none).
_SCORE = SamplingParams(max_tokens=1, temperature=0.0)


def _int_arg(name: str, value: object, minimum: int) -> int:
    """``value`` (an int, or its text from ``--model_args``) checked ``>= minimum``."""
    try:
        number = int(str(value))
    except ValueError:
        number = minimum - 1
    if number < minimum or isinstance(value, (bool, float)):
        raise ValueError(f"{name}={value!r} is out of range: valid is an integer >= {minimum}")
    return number


def move_trailing_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """``(context, continuation)`` with the context's trailing whitespace moved to the
    start of the continuation, so that it is scored: lm-evaluation-harness's rule for a
    log-likelihood request (``TemplateLM._encode_pair``), which its other models follow.
    An empty context stays empty (the harness scores it after its prefix token)."""
    n_space = len(context) - len(context.rstrip())
    if n_space == 0:
        return context, continuation
    return context[:-n_space], context[-n_space:] + continuation


def slots_of(slots: object, batch_size: object) -> int:
    """``slots``, or the harness's ``batch_size`` when it is an integer > 1, or 4."""
    if slots is None:
        size = str(batch_size)
        slots = int(size) if size.isdigit() and int(size) > 1 else DEFAULT_SLOTS
    return _int_arg("slots", slots, 1)


@register_model(MODEL_NAME)
class LlamaBatchLM(LM):
    """lm-evaluation-harness's ``LM`` on a GGUF model through llamabatch.

    Args:
        model: a GGUF path (loaded here with ``n_ctx``, ``n_threads``, ``n_gpu_layers``
            and closed by :meth:`close`), a loaded ``llama_cpp.Llama``, or a
            :class:`~llamabatch.BatchGenerator` to use as it is (its slots, ``n_ctx_seq``
            and ``n_batch``).
        slots: sequences decoded together (``BatchGenerator(slots=...)``).
        n_ctx: the ``Llama``'s context when ``model`` is a path.
        n_ctx_seq: KV cache tokens per slot (default ``min(4096, n_ctx)``).
        n_batch: most tokens per ``llama_decode``.
        n_threads, n_gpu_layers: of the ``Llama`` when ``model`` is a path.
        max_length: most predicted tokens per rolling window (default ``n_ctx_seq - 2``:
            a window and its context token fit a slot).
        max_gen_toks: ``max_tokens`` of ``generate_until`` when a request names none.
        prefix_token_id: the token before a text's first token (default: the model's BOS,
            else its EOS).
        batch_size: the harness's ``--batch_size``: an integer > 1 sets ``slots`` when
            ``slots`` is not given; 1 (its default) and ``auto`` leave ``slots`` as it is.
        max_batch_size, device: the harness's; not used (its command line always gives
            a device; llama.cpp places layers by ``n_gpu_layers``).
        quiet: no progress bars.

    Raises:
        ValueError: a bad argument (named).
        llamabatch.ModelFileError: ``model`` is no readable GGUF file.
    """

    def __init__(
        self,
        model: Any,
        *,
        slots: int | None = None,
        n_ctx: int = 4096,
        n_ctx_seq: int | None = None,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
        max_length: int | None = None,
        max_gen_toks: int = 256,
        prefix_token_id: int | None = None,
        batch_size: int | str | None = None,
        max_batch_size: int | None = None,
        device: str | None = None,
        quiet: bool = False,
    ) -> None:
        super().__init__()
        self.quiet = bool(quiet)
        self._owned: Any = None
        if isinstance(model, BatchGenerator):
            self.generator, llm = model, None
        else:
            llm = model
            if isinstance(model, (str, Path)):
                from ..model import load_llama

                threads = None if n_threads is None else _int_arg("n_threads", n_threads, 1)
                llm = self._owned = load_llama(
                    model,
                    n_ctx=_int_arg("n_ctx", n_ctx, 2),
                    n_threads=threads,
                    n_gpu_layers=int(n_gpu_layers),
                )
            self.generator = BatchGenerator(
                llm,
                slots=slots_of(slots, batch_size),
                n_ctx_seq=None if n_ctx_seq is None else _int_arg("n_ctx_seq", n_ctx_seq, 3),
                n_batch=_int_arg("n_batch", n_batch, 1),
            )
        vocab = self.generator.backend.vocab
        self._tokenize = vocab.tokenize
        self._bos_prefix = len(vocab.tokenize(""))  # tokens the tokenizer puts first
        room = cast(int, self.generator.config.n_ctx_seq) - 2  # resolved by the generator
        self.max_length = room if max_length is None else _int_arg("max_length", max_length, 1)
        self.max_gen_toks = _int_arg("max_gen_toks", max_gen_toks, 1)
        if prefix_token_id is None:
            prefix_token_id = self._default_prefix(llm, vocab.eog_ids)
        self.prefix_token_id = _int_arg("prefix_token_id", prefix_token_id, 0)

    @staticmethod
    def _default_prefix(llm: Any, eog_ids: Iterable[int]) -> int:
        """The model's BOS, else its EOS (a ``Llama``), else its first end-of-generation id."""
        if llm is not None:
            bos = int(llm.token_bos())
            return bos if bos >= 0 else int(llm.token_eos())
        return min(eog_ids)

    def close(self) -> None:
        """Free the batch context, and the ``Llama`` when it was loaded here (idempotent)."""
        self.generator.close()
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self) -> LlamaBatchLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the LM interface ---------------------------------------------------------------
    def loglikelihood(
        self, requests: list[Any], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        """``(log P(continuation | context), is_greedy)`` per request, in order: the
        context's trailing whitespace is scored as the continuation's start (the harness's
        rule, :func:`move_trailing_whitespace`); an empty context is
        :attr:`prefix_token_id` with the continuation tokenized alone."""
        asked = [tuple(req.args) for req in requests]
        pairs = [move_trailing_whitespace(context, cont) for context, cont in asked]
        groups: dict[str, list[int]] = {}  # context -> its requests with a continuation
        for i, (context, cont) in enumerate(pairs):
            if cont:  # an empty continuation: log 1 = 0, greedy
                groups.setdefault(context, []).append(i)
        prompts: list[object] = []
        samplings = []
        for context, members in groups.items():
            prompts.append(context if context else [self.prefix_token_id])
            choices = tuple(dict.fromkeys(pairs[i][1] for i in members))
            samplings.append(
                replace(_SCORE, choices=choices, score_choices=True, choice_leading_space=False)
            )
        done = self._complete(prompts, samplings, "loglikelihood", disable_tqdm)
        results: list[tuple[float, bool]] = [(0.0, True)] * len(pairs)
        for members, c in zip(groups.values(), done):
            self._check(c, "loglikelihood", members[0], asked[members[0]][0])
            if c.choice_logprobs is None or c.choice_greedy is None:
                raise ValueError(
                    f"{type(self.generator.backend).__name__} reports no row maxima: "
                    "is_greedy cannot be told"
                )
            for i in members:
                cont = pairs[i][1]
                results[i] = (c.choice_logprobs[cont], c.choice_greedy[cont])
        for pair, result in zip(asked, results):
            self.cache_hook.add_partial("loglikelihood", pair, result)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """log P(text) per request: the sum over its rolling windows."""
        windows: list[list[int]] = []
        owners: list[tuple[int, int]] = []  # (request, predicted tokens)
        for k, req in enumerate(requests):
            (text,) = req.args
            tokens = self._tokenize(text)[self._bos_prefix :]
            for context, pred in map(
                make_disjoint_window,
                get_rolling_token_windows(tokens, self.prefix_token_id, self.max_length, 1),
            ):
                windows.append(list(context) + list(pred))
                owners.append((k, len(pred)))
        sampling = replace(_SCORE, score_prompt=True)
        done = self._complete(windows, [sampling] * len(windows), "rolling", disable_tqdm)
        totals = [0.0] * len(requests)
        for (k, n_pred), c in zip(owners, done):
            self._check(c, "loglikelihood_rolling", k, requests[k].args[0])
            totals[k] += sum((c.prompt_logprobs or ())[-n_pred:])
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", tuple(req.args), total)
        return totals

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """The reply to each context, cut before the first ``until`` string."""
        args = [tuple(req.args) for req in requests]
        samplings = [generation_sampling(kwargs, self.max_gen_toks) for _, kwargs in args]
        done = self._complete([a[0] for a in args], samplings, "generate_until", disable_tqdm)
        out = []
        for k, ((context, kwargs), c) in enumerate(zip(args, done)):
            self._check(c, "generate_until", k, context)
            out.append(c.text)
            self.cache_hook.add_partial("generate_until", (context, kwargs), c.text)
        return out

    # -- helpers ------------------------------------------------------------------------
    def _complete(
        self,
        prompts: Sequence[object],
        samplings: Sequence[SamplingParams],
        what: str,
        disable_tqdm: bool,
    ) -> list[Completion]:
        done: list[Completion] = []
        quiet = disable_tqdm or self.quiet
        with tqdm(total=len(prompts), desc=f"llamabatch {what}", disable=quiet) as bar:
            for page in self.generator.iter_groups(prompts, samplings):
                done.extend(page)
                bar.update(len(page))
        return done

    @staticmethod
    def _check(c: Completion, what: str, k: int, context: object) -> None:
        if c.error is not None:
            shown = repr(context) if len(str(context)) <= 80 else repr(str(context)[:77]) + "..."
            raise ValueError(f"{what} request {k} (context {shown}) failed: {c.error}")
