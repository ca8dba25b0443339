"""Comparing two paths' replies the way llama.cpp's numerics allow (shared test helper).

llama.cpp's logits depend on how the tokens were split into ubatches and on the CPU's
kernels: a bare ``Llama`` with ``n_batch=17`` instead of 512 moves SmolLM2's log-probs by
up to :data:`SPLIT_NOISE`, and a greedy pick between two near-tied tokens can flip
between a batch and one item alone, or between two CPUs. So two paths (batched and
alone, ``create_completion`` and ours, a cache hit and a prefill) are compared token by
token *until their first near tie*: where they first differ, the logits of both picks
after the common part are computed by a separate ``Llama(logits_all=True)`` on the same
file (:class:`Reference`), and the divergence is accepted only when the two picks'
logits are within the tolerance of each other. The rest of the reply is not compared
(it continues another text). Log-probabilities are compared within
:data:`SPLIT_NOISE`.

Import it from any test (``from agreement import ...``): pytest puts ``tests/`` on
``sys.path`` for ``tests/conftest.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Largest change of a log-probability between two splits of the same tokens into
#: ubatches, measured on SmolLM2-135M-Instruct Q4_1 (``Llama(n_batch=17)`` against 512,
#: design.md "Numerics"); the tolerance of every cross-path log-prob comparison.
SPLIT_NOISE = 0.2

#: Largest logit gap at which two paths' different greedy picks count as a near tie on a
#: real model: each path's logits may be off the reference's by up to
#: :data:`SPLIT_NOISE`, so two picks this close can swap.
TIE_TOLERANCE = 2 * SPLIT_NOISE


@dataclass
class Reference:
    """A ``Llama(logits_all=True)`` on ``model_path``, made on first use (its ``scores``
    array is ``n_ctx`` x ``n_vocab`` floats: only made when a divergence is checked).

    Args:
        model_path: the GGUF file both compared paths ran.
        n_ctx: the reference's context (prompt + reply of the longest item compared).
        kwargs: more ``Llama`` arguments (e.g. ``swa_full``).
    """

    model_path: Any
    n_ctx: int = 2048
    kwargs: dict = field(default_factory=dict)
    _llm: Any = None

    def logits_after(self, tokens: Sequence[int]) -> Any:
        """The logits (float32[n_vocab]) of the token after ``tokens``."""
        if self._llm is None:
            import llama_cpp

            self._llm = llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=2,
                logits_all=True,
                verbose=False,
                **self.kwargs,
            )
        ref = self._llm
        ref.reset()
        ref.eval(list(tokens))
        return ref.scores[ref.n_tokens - 1]

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()
            self._llm = None


@dataclass(frozen=True)
class Divergence:
    """Where two replies first differ: reply token ``k``, the picks and their logit gap."""

    label: object
    k: int
    pick_a: int
    pick_b: int
    gap: float


def divergence(
    reference: Reference,
    prompt: Sequence[int],
    a: Sequence[int],
    b: Sequence[int],
    tolerance: float = TIE_TOLERANCE,
    label: object = None,
) -> Divergence | None:
    """Assert replies ``a`` and ``b`` (token ids) after ``prompt`` agree up to a near tie
    (one reply being a prefix of the other is agreement here: see
    :func:`ended_divergence` for replies that both ran to their end).

    Returns:
        ``None`` when one reply is a prefix of the other; else the first divergence
        (accepted: within ``tolerance``).

    Raises:
        AssertionError: they differ where the reference's logits are not near-tied.
    """
    a, b = list(a), list(b)
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if k is None:
        return None
    row = reference.logits_after(list(prompt) + b[:k])
    gap = abs(float(row[a[k]]) - float(row[b[k]]))
    found = Divergence(label, k, a[k], b[k], gap)
    assert gap <= tolerance, (
        f"{label}: the replies differ at reply token {k} ({a[k]} vs {b[k]}) where their "
        f"logits differ by {gap:.4g} > {tolerance}: not a near tie"
    )
    return found


def ended_divergence(
    reference: Reference,
    prompt: Sequence[int],
    a: Sequence[int],
    b: Sequence[int],
    eog_ids: frozenset[int] | set[int],
    tolerance: float = TIE_TOLERANCE,
    label: object = None,
) -> Divergence | None:
    """:func:`divergence`, where both replies ran to their end (EOG or the same
    ``max_tokens``): a reply that is a strict prefix of the other ended there with an EOG
    token, compared with the likeliest EOG token."""
    a, b = list(a), list(b)
    found = divergence(reference, prompt, a, b, tolerance, label)
    if found is not None or len(a) == len(b):
        return found
    k = min(len(a), len(b))
    row = reference.logits_after(list(prompt) + b[:k])
    assert eog_ids, (label, "replies of different lengths without EOG ids")
    eog = max(eog_ids, key=lambda t: float(row[t]))
    pick_a = a[k] if k < len(a) else eog
    pick_b = b[k] if k < len(b) else eog
    gap = abs(float(row[pick_a]) - float(row[pick_b]))
    assert gap <= tolerance, (
        f"{label}: one reply ends at token {k} where the other goes on "
        f"({pick_a} vs {pick_b}), logits {gap:.4g} apart > {tolerance}: not a near tie"
    )
    return Divergence(label, k, pick_a, pick_b, gap)


def assert_replies_agree(
    reference: Reference,
    prompts: Sequence[Sequence[int]],
    got: Sequence[Sequence[int]],
    want: Sequence[Sequence[int]],
    eog_ids: frozenset[int] | set[int],
    tolerance: float = TIE_TOLERANCE,
    max_divergent: float = 0.5,
) -> list[Divergence]:
    """:func:`ended_divergence` for each pair; at most ``max_divergent`` of the pairs
    (a fraction) may part at a near tie, so the comparison cannot pass vacuously.

    Returns:
        the divergences found (for the assertion data of the caller).
    """
    assert len(prompts) == len(got) == len(want)
    found = [
        d
        for i, (p, a, b) in enumerate(zip(prompts, got, want))
        if (d := ended_divergence(reference, p, a, b, eog_ids, tolerance, i)) is not None
    ]
    assert len(found) <= max_divergent * len(prompts), found
    return found


def prompt_ids(llm: Any, prompt: object) -> list[int]:
    """The token ids llamabatch makes of ``prompt`` (a string: ``Llama.tokenize`` with
    BOS and special tokens, as ``create_completion``; else token ids as they are)."""
    if isinstance(prompt, str):
        return list(llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
    return [int(t) for t in prompt]


def assert_completions_agree(
    reference: Reference,
    llm: Any,
    prompts: Sequence[object],
    got: Sequence[Any],
    want: Sequence[Any],
    n: int | None = None,
    tolerance: float = TIE_TOLERANCE,
    max_divergent: float = 0.5,
) -> list[Divergence]:
    """:func:`assert_replies_agree` on two lists of :class:`~llamabatch.Completion`
    (their first ``n`` reply tokens, or all), after checking neither is an error."""
    for g, w in zip(got, want):
        assert g.error is None and w.error is None, (g.index, g.error, w.error)
    return assert_replies_agree(
        reference,
        [prompt_ids(llm, p) for p in prompts],
        [list(g.token_ids)[:n] for g in got],
        [list(w.token_ids)[:n] for w in want],
        _eog_ids(llm),
        tolerance,
        max_divergent,
    )


def pick_is_near_best(
    reference: Reference,
    prefix: Sequence[int],
    pick: int,
    tolerance: float = TIE_TOLERANCE,
    label: object = None,
) -> float:
    """Assert ``pick``'s logit after ``prefix`` is within ``tolerance`` of the likeliest
    token's (the reference's): a greedy pick that another path did not make is then one
    side of a near tie. Returns the gap."""
    row = reference.logits_after(prefix)
    gap = float(row.max()) - float(row[pick])
    assert gap <= tolerance, (
        f"{label}: token {pick} is {gap:.4g} below the likeliest one: not a near tie"
    )
    return gap


_EOG_IDS: dict[int, frozenset[int]] = {}


def _eog_ids(llm: Any) -> frozenset[int]:
    """The model's end-of-generation ids (``llama_vocab_is_eog``), once per ``Llama``."""
    if id(llm) not in _EOG_IDS:
        from llamabatch.llamacpp.backend import LlamaBackend

        _EOG_IDS[id(llm)] = frozenset(LlamaBackend(llm).vocab.eog_ids)
    return _EOG_IDS[id(llm)]


def _log_softmax(row: Any) -> Any:
    import numpy as np

    row = np.asarray(row, dtype=np.float64)
    top = row.max()
    return row - (top + math.log(float(np.exp(row - top).sum())))


def reference_scores(ref: Any, tokens: Sequence[int], start: int) -> tuple[float, bool]:
    """On a ``Llama(logits_all=True)`` ``ref``, from one eval of ``tokens``: log P(tokens[start:]
    | tokens[:start]) (log-softmax of ``scores`` summed) and whether each of those tokens is
    its row's argmax (greedy)."""
    import numpy as np

    tokens = list(tokens)
    ref.reset()
    ref.eval(tokens)
    total, greedy = 0.0, True
    for j in range(start, len(tokens)):
        row = ref.scores[j - 1]
        total += float(_log_softmax(row)[tokens[j]])
        greedy = greedy and int(np.argmax(row)) == tokens[j]
    return total, greedy


def reference_continuation(ref: Any, prompt: str, written: str) -> tuple[float, bool]:
    """log P(written | prompt) and its greedy flag, ``written`` exactly as given: its tokens are
    what follows the prompt's own in ``tokenize(prompt + written)`` (BOS as the model wants)."""
    p = ref.tokenize(prompt.encode(), add_bos=True, special=True)
    full = ref.tokenize((prompt + written).encode(), add_bos=True, special=True)
    k = 0
    while k < min(len(p), len(full)) and p[k] == full[k]:
        k += 1
    return reference_scores(ref, full, k)


def reference_logprob(ref: Any, prompt: str, label: str) -> float:
    """The label scores' independent computation on a ``Llama(logits_all=True)`` ``ref``:
    log P(label | prompt): the label as written and with one leading space, each the
    sum of log-softmax over its tokens after the prompt's, from one eval of the whole."""
    parts = [reference_continuation(ref, prompt, w)[0] for w in (label, " " + label)]
    top = max(parts)
    return top + math.log(sum(math.exp(v - top) for v in parts))
