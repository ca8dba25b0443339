"""Hypothesis strategies for prompts, fault plans and fake backends; hypothesis is imported
when a strategy is asked for."""

from __future__ import annotations

from .fake import FakeBackend
from .faults import BACKEND_EXCEPTIONS, DECODE_FAULT_CODES, FailWhen, FaultPlan
from .replies import HashReply


def _st():
    from hypothesis import strategies as st  # only when a strategy is asked for

    return st


def prompts(
    *,
    min_items: int = 0,
    max_items: int = 100,
    max_len: int = 80,
    n_vocab: int = 260,
    invalid: bool = True,
):
    """A ``SearchStrategy[list[object]]``: ``min_items`` to ``max_items`` prompts for a
    :class:`FakeBackend` with the default vocabulary: ``str`` (0 to ``max_len`` ASCII or
    multi-byte characters), UTF-8 ``bytes``, token-id lists (0 to ``max_len`` ids in
    [0, n_vocab)); with ``invalid`` also ids out of range, invalid UTF-8 and non-prompts."""
    st = _st()
    text = st.text(st.sampled_from("abc xyz\n.é€🙂"), max_size=max_len)
    ids = st.lists(st.integers(0, n_vocab - 1), max_size=max_len)
    valid = text | ids | text.map(lambda s: s.encode("utf-8"))
    item = valid
    if invalid:
        bad = st.lists(
            st.integers(-3, n_vocab + 3), min_size=1, max_size=max_len
        ) | st.sampled_from([None, 42, 3.5, {"a": 1}, [1, "x"], [1.5], [[1]], b"\xff\xfe", ""])
        item = st.one_of(valid, valid, valid, bad)
    return st.lists(item, min_size=min_items, max_size=max_items)


def prefixed_prompts(
    *,
    min_items: int = 0,
    max_items: int = 40,
    max_prefix: int = 60,
    max_suffix: int = 20,
    n_vocab: int = 260,
):
    """A ``SearchStrategy[list[list[int]]]`` of token-id prompts sharing prefixes, as a tagger's
    do: one of up to 3 prefixes (0 to ``max_prefix`` ids) plus a suffix (1 to ``max_suffix``
    ids), sometimes a prompt repeated or a prefix of another."""
    st = _st()
    ids = st.integers(0, n_vocab - 1)

    @st.composite
    def build(draw):
        heads = draw(st.lists(st.lists(ids, max_size=max_prefix), min_size=1, max_size=3))
        n = draw(st.integers(min_items, max_items))
        out: list[list[int]] = []
        for _ in range(n):
            kind = draw(st.sampled_from(["new", "new", "new", "repeat", "cut"]))
            if kind != "new" and out:
                base = draw(st.sampled_from(out))
                out.append(
                    list(base) if kind == "repeat" else base[: draw(st.integers(1, len(base)))]
                )
            else:
                head = draw(st.sampled_from(heads))
                out.append(head + draw(st.lists(ids, min_size=1, max_size=max_suffix)))
        return out

    return build()


def fault_plans(*, max_decode_at: int = 30, fail_open: bool = True):
    """A ``SearchStrategy[FaultPlan]``: mostly none; sometimes the batch cannot be created
    (``fail_open``), the k-th decode fails (a code of :data:`DECODE_FAULT_CODES` or one of
    :data:`BACKEND_EXCEPTIONS`), the k-th copy, save or load fails, or the prompts matching
    a :class:`FailWhen` fail alone."""
    st = _st()
    return st.builds(
        FaultPlan,
        fail_open=st.sampled_from([False] * 5 + [True]) if fail_open else st.just(False),
        fail_decode_at=st.none() | st.integers(1, max_decode_at),
        fail_code=st.sampled_from(DECODE_FAULT_CODES),
        fail_alone=st.none() | st.builds(FailWhen, st.integers(2, 7), st.integers(0, 1)),
        fail_exc=st.sampled_from((None,) * 6 + BACKEND_EXCEPTIONS),
        fail_copy_at=st.none() | st.integers(1, 6),
        fail_state_at=st.none() | st.integers(1, 6),
    )


def fake_backends(*, faults=None, max_tokens: int | None = None, max_reply: int = 40):
    """A ``SearchStrategy[FakeBackend]``: random replies (:class:`HashReply` of at most
    ``max_reply`` tokens, sometimes an EOG inside), 0-3 EOG ids, n_vocab 260-300, n_ctx
    2-4096, ctx_pad 1/8/256, an optional n_batch cap, a recurrent memory one time in four
    (declared or not), faults from ``faults`` (default :func:`fault_plans`) and ``max_tokens``."""
    st = _st()
    faults = fault_plans() if faults is None else faults

    @st.composite
    def build(draw):
        n_vocab = draw(st.integers(260, 300))
        eog = tuple(sorted(draw(st.sets(st.integers(256, n_vocab - 1), max_size=3))))
        reply = HashReply(
            draw(st.integers(0, 2**32 - 1)),  # the fake's reply seed, not a sampler's
            draw(st.integers(0, max_reply)),
            n_vocab,
            eog,
            draw(st.sampled_from([0.0, 0.3])),
        )
        n_ctx = draw(st.integers(2, 64) | st.integers(64, 4096))
        return FakeBackend(
            reply,
            eog_ids=eog,
            n_vocab=n_vocab,
            n_ctx=n_ctx,
            max_slots=draw(st.integers(8, 64)),
            max_tokens=max_tokens,
            ctx_pad=draw(st.sampled_from([1, 1, 8, 256])),
            n_batch_cap=draw(st.none() | st.integers(1, 64)),
            recurrent=draw(st.sampled_from([False, False, False, True])),
            declares_recurrent=draw(st.booleans()),
            **draw(faults).kwargs(),
        )

    return build()
