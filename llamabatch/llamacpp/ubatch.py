"""How llama.cpp splits one decode call into ubatches, and keeping label scoring out of
ubatches of a single token per sequence.

With a non-unified KV cache (one stream per sequence) llama.cpp splits a batch with
``llama_batch_allocr::split_equal(n_ubatch, sequential=true)`` (``src/llama-batch.cpp``):
walking the batch in order, a ubatch takes the first sequence with tokens left, then
each next one whose id is the last taken id + 1, and the same number of tokens of each
(the fewest any of them has left). The engine lays spans out by ascending seq id and
plans at most ``n_batch`` = ``n_ubatch`` tokens, so ``n_ubatch`` never cuts a ubatch
shorter.

A ubatch of one token takes llama.cpp's matrix-vector kernels instead of the tiled ones
(``BackendInfo.min_score_run``). A span's tail can end up alone like
that when its neighbours are shorter: measured on SmolLM2-135M Q4_1, a prompt of 50
tokens decoded next to one of 49 left its last row alone, and a label scored from it
was 0.11 nats off ``Llama(logits_all=True)``, against 0.0000 with the neighbour cut to
48. A ubatch of one token per sequence (the tail of a chunk next to a single
token of another) takes them too, and the keys and values it writes move every later
row of that prompt: the prompts' first tokens decoded one per sequence next to a
one-token remainder put a label 0.15 nats off. :func:`avoid_one_per_seq` cuts the spans
of a call so that no token of a scoring sequence is decoded in such a ubatch, unless a
decode token (every reply step is one token per sequence) shares it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..engine.step import Span

#: A piece of a ubatch: (index of the span in the call, offset in its tokens, tokens).
Piece = tuple[int, int, int]


def split_equal(spans: Sequence[Span]) -> list[list[Piece]]:
    """The ubatches llama.cpp makes of a call (see the module doc), in order.

    Args:
        spans: the call's spans, in batch order.

    Returns:
        one list of pieces per ubatch.
    """
    left = [len(s.tokens) for s in spans]
    done = [0] * len(spans)
    out: list[list[Piece]] = []
    while any(left):
        taken: list[int] = []
        for i, span in enumerate(spans):
            if left[i] and (not taken or span.seq_id == spans[taken[-1]].seq_id + 1):
                taken.append(i)
        k = min(left[i] for i in taken)
        out.append([(i, done[i], k) for i in taken])
        for i in taken:
            left[i] -= k
            done[i] += k
    return out


def one_per_seq(
    spans: Sequence[Span], scoring: Collection[int], decoding: Collection[int] = ()
) -> list[int]:
    """Indices of the spans of ``scoring`` sequences with a token in a ubatch of one token
    per sequence (``n_seq_tokens`` = 1), leaving out a span that shares a ubatch with a
    ``decoding`` sequence's token (a reply step is one token per sequence: a label run
    beside it rides along, with that batch-shape noise)."""
    pieces = split_equal(spans)
    beside_reply = {
        i
        for ubatch in pieces
        if any(spans[j].seq_id in decoding for j, _, _ in ubatch)
        for i, _, _ in ubatch
    }
    bad: list[int] = []
    for ubatch in pieces:
        if ubatch[0][2] != 1:
            continue
        bad += [
            i
            for i, _, _ in ubatch
            if spans[i].seq_id in scoring and i not in beside_reply and i not in bad
        ]
    return bad


def _cut(span: Span, n: int) -> Span:
    """``span``'s first ``n`` tokens (a prompt chunk: no logits on a cut span)."""
    targets = None if span.targets is None else tuple(span.targets[:n])
    if targets is not None and not any(targets):
        targets = None
    return Span(span.seq_id, span.pos, tuple(span.tokens[:n]), False, targets, precise=span.precise)


def _cuts(span: Span) -> list[Span]:
    """Shorter versions of a prefill chunk or a label run (what is left of it goes into
    the next call): two or three tokens shorter, at least one token kept, so that a cut
    never leaves a single token for the next call. A decode token, and a prompt's last
    chunk whose row samples (its own token or a shared one), stay whole."""
    if span.logits:
        return []
    return [_cut(span, len(span.tokens) - d) for d in (2, 3) if len(span.tokens) > d]


def avoid_one_per_seq(
    spans: Sequence[Span], scoring: Collection[int], decoding: Collection[int] = ()
) -> list[Span]:
    """``spans`` cut so that no token of a scoring sequence is decoded in a ubatch of one
    token per sequence (see the module doc and :func:`one_per_seq`), where shortening
    another prefill chunk or label run, else the span itself, does it. Every span keeps
    at least one token, so no sequence waits for another; unchanged when nothing is
    found, or when no cut helps (a run of one token, a call of one span).

    Args:
        spans: one call's spans, in batch order (at most one per sequence).
        scoring: the seq ids of the sequences scoring labels.
        decoding: the seq ids of the sequences feeding back a sampled token.

    Returns:
        the spans to decode, in the same order, each a prefix (at least one token) of
        the one given.
    """
    out = list(spans)
    for _ in range(2 * len(out) + 1):  # each round mends one span or gives up
        bad = one_per_seq(out, scoring, decoding)
        if not bad:
            return out
        i = bad[0]
        rest = {out[k].seq_id for k in bad[1:]}
        order = [j for j in range(len(out)) if j != i] + [i]
        trials = [out[:j] + [c] + out[j + 1 :] for j in order for c in _cuts(out[j])]
        fixed = next(
            (t for t in trials if {t[k].seq_id for k in one_per_seq(t, scoring, decoding)} <= rest),
            None,
        )
        if fixed is None:
            return out
        out = fixed
    return out


def shape(spans: Sequence[Span]) -> Sequence[Span]:
    """The spans of one call as llama.cpp should get them: those of ``precise`` sequences
    kept out of ubatches of one token per sequence (:func:`avoid_one_per_seq`; a reply
    step, ``Span.step``, rides along)."""
    scoring = {s.seq_id for s in spans if s.precise}
    if not scoring:
        return spans
    return avoid_one_per_seq(spans, scoring, {s.seq_id for s in spans if s.step})
