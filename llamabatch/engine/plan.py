"""Decode plans: what goes into the next ``llama_decode`` call of the slot engine.

Pure functions returning plain :class:`~llamabatch.engine.backend.Span` lists, in the manner of
nano-vllm's ``schedule()``. Facts respected (llama.h, ``llama_decode``): at most
``n_batch`` tokens per call, one seq id per token, positions without gaps, logits only
where a token will be sampled. Decode tokens go first (each running sequence's last
sampled token), then prompt chunks of the sequences still prefilling fill the rest of
the ``n_batch`` budget, like llama-server's slot loop (``server_context::update_slots``).

The spans of a call are laid out by ascending seq id. With a non-unified KV cache
(one stream per sequence) llama.cpp splits a batch into ubatches with
``llama_batch_allocr::split_equal(n_ubatch, sequential=true)``, which puts into one
ubatch only sequences whose ids follow each other (+1) in batch order
(llama.cpp ``src/llama-batch.cpp``, "accept only increasing sequence ids"); every
further ubatch is one more pass over the weights, and a ubatch whose sequences differ
from the previous one's cannot reuse its graph (``llm_graph_params::allow_reuse``).
What that costs is measured in docs/engine.md ("One ubatch per step").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .backend import Span


@dataclass(frozen=True, slots=True)
class Decoding:
    """A sequence that feeds back its last sampled ``token`` at position ``pos``."""

    seq_id: int
    pos: int
    token: int


@dataclass(frozen=True, slots=True)
class Prefilling:
    """A sequence with prompt tokens left to feed.

    Attributes:
        seq_id: the sequence.
        pos: position of ``tokens[0]`` (the tokens already in its cache).
        tokens: the rest of its prompt, at least one token.
        stop_at: feed at most this many tokens in one call (a copy of the cache must
            be taken exactly there), or ``None``.
    """

    seq_id: int
    pos: int
    tokens: Sequence[int]
    stop_at: int | None = None


def plan_step(
    decoding: Sequence[Decoding], prefilling: Sequence[Prefilling], n_batch: int
) -> list[Span]:
    """The spans of one decode call.

    Every sequence gets at most one span. Decoding sequences come first (at most
    ``n_batch`` of them, in the given order: the caller rotates it when they do not all
    fit); the prefilling ones then fill the remaining budget in the given order, a
    prompt being split across calls when it does not fit. The chosen spans are
    returned by ascending seq id (one ubatch for consecutive ids: see the module
    docstring). Logits are requested on a
    decode token and on the last token of a prompt only, so each sequence samples its
    first token right after the call that ends its prompt.

    Args:
        decoding: sequences feeding back their last sampled token.
        prefilling: sequences with prompt tokens left (``stop_at`` >= 1 when set).
        n_batch: most tokens per call (>= 1).

    Returns:
        the spans by ascending seq id, their token counts summing to ``<= n_batch``
        (empty when both inputs are).

    Raises:
        ValueError: ``n_batch`` < 1, or an empty prompt rest.
    """
    if n_batch < 1:
        raise ValueError(f"n_batch={n_batch} is out of range: valid is an integer >= 1")
    spans = [Span(d.seq_id, d.pos, (d.token,), True) for d in decoding[:n_batch]]
    room = n_batch - len(spans)
    for p in prefilling:
        if room == 0:
            break
        n = len(p.tokens)
        if n == 0:
            raise ValueError(f"seq {p.seq_id} has no prompt tokens left to prefill")
        take = min(room, n if p.stop_at is None else min(n, p.stop_at))
        spans.append(Span(p.seq_id, p.pos, p.tokens[:take], take == n))
        room -= take
    spans.sort(key=lambda span: span.seq_id)
    return spans
