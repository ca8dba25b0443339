"""How llama.cpp splits one decode call into ubatches (``llama_batch_allocr::split_equal``,
``src/llama-batch.cpp``), and keeping label scoring out of ubatches of one token per
sequence, which round differently (docs/engine.md, "One ubatch per step"): by cutting
spans (:func:`shape`), and where no cut helps by decoding a span in a call of its own
(:func:`decode_calls`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..engine.step import Span

#: A piece of a ubatch: (index of the span in the call, offset in its tokens, tokens).
Piece = tuple[int, int, int]


def split_equal(spans: Sequence[Span]) -> list[list[Piece]]:
    """The ubatches llama.cpp makes of a call's ``spans`` (in batch order), one list of pieces
    each: a ubatch takes the first sequence with tokens left, then each next one whose id is
    the last taken + 1, and the same number of tokens (the fewest left) of each."""
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
    """Indices of the spans of ``scoring`` sequences with a token in a ubatch of one token per
    sequence, except a span that shares a ubatch with a ``decoding`` sequence's token."""
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
    """A prefill chunk or label run two or three tokens shorter (at least one token kept); none
    for a span whose row samples."""
    if span.logits:
        return []
    return [_cut(span, len(span.tokens) - d) for d in (2, 3) if len(span.tokens) > d]


def avoid_one_per_seq(
    spans: Sequence[Span], scoring: Collection[int], decoding: Collection[int] = ()
) -> list[Span]:
    """``spans`` (one call, batch order, at most one per sequence) cut so that no token of a
    ``scoring`` sequence is decoded in a ubatch of one token per sequence, by shortening
    another prefill chunk or label run, else the span itself. Each returned span is a prefix
    (at least one token) of the one given, in the same order; unchanged when no cut helps."""
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
    """The spans of one call as llama.cpp should get them: ``precise`` sequences kept out of
    ubatches of one token per sequence (:func:`avoid_one_per_seq`; a reply step rides along)."""
    scoring = {s.seq_id for s in spans if s.precise}
    if not scoring:
        return spans
    return avoid_one_per_seq(spans, scoring, {s.seq_id for s in spans if s.step})


def decode_calls(spans: Sequence[Span]) -> list[list[Span]]:
    """The ``llama_decode`` calls of one step's ``spans``: :func:`shape`'s spans in one call,
    less the spans of ``precise`` sequences still left with a token in a ubatch of one token
    per sequence, each of which (two tokens or more) follows in a call of its own. Every
    span is in exactly one call; the first call keeps the batch order."""
    shaped = list(shape(spans))
    scoring = {s.seq_id for s in shaped if s.precise}
    if not scoring:
        return [shaped]
    decoding = {s.seq_id for s in shaped if s.step}
    alone: list[Span] = []
    while True:
        bad = [i for i in one_per_seq(shaped, scoring, decoding) if len(shaped[i].tokens) > 1]
        if not bad:
            break
        alone.append(shaped.pop(bad[0]))
    return ([shaped] if shaped else []) + [[span] for span in alone]
