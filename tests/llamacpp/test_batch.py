"""LlamaBatch: capacity, sequence range, numpy fills seen through the C struct, reuse.

Needs llama-cpp-python (``llama_batch_init``) but no model.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch.llamacpp.batch import LlamaBatch


def rows(batch: LlamaBatch) -> list[tuple[int, int, int, int, int]]:
    """(token, pos, n_seq_id, seq_id[0], logits) of each filled row, read from the C struct."""
    s = batch.native.struct
    return [
        (s.token[i], s.pos[i], s.n_seq_id[i], s.seq_id[i][0], s.logits[i])
        for i in range(s.n_tokens)
    ]


@pytest.fixture
def batch():
    with LlamaBatch(8, 3) as b:
        yield b


def test_add_run_fills_the_struct_and_returns_last_index(batch):
    assert batch.add_run([11, 12, 13], pos0=5, seq_id=2, logits_last=True) == 2
    assert batch.add(99, pos=0, seq_id=0, logits=False) == 3
    assert batch.add_run([7], pos0=40, seq_id=1, logits_last=False) == 4
    assert batch.n_tokens == 5 and batch.native.struct.n_tokens == 5
    assert rows(batch) == [
        (11, 5, 1, 2, 0),
        (12, 6, 1, 2, 0),
        (13, 7, 1, 2, 1),
        (99, 0, 1, 0, 0),
        (7, 40, 1, 1, 0),
    ]


def test_capacity_is_enforced(batch):
    batch.add_run(list(range(6)), 0, 0, True)
    with pytest.raises(ValueError, match="exceed the batch capacity: 6 of 8"):
        batch.add_run([1, 2, 3], 6, 0, True)
    batch.add_run([1, 2], 6, 0, True)
    assert batch.free == 0
    with pytest.raises(ValueError, match="capacity"):
        batch.add(1, 8, 0, True)
    assert batch.n_tokens == 8


@pytest.mark.parametrize("seq_id", [-1, 3, 100, True, 1.0])
def test_seq_id_outside_range_is_refused(batch, seq_id):
    with pytest.raises(ValueError, match=r"seq_id=.* valid is an integer \[0, 3\)"):
        batch.add(1, 0, seq_id, True)
    with pytest.raises(ValueError, match=r"seq_id="):
        batch.add_run([1, 2], 0, seq_id, True)
    assert batch.n_tokens == 0


def test_negative_pos_and_empty_run_are_refused(batch):
    with pytest.raises(ValueError, match="pos=-1"):
        batch.add(1, -1, 0, True)
    with pytest.raises(ValueError, match="pos0=-3"):
        batch.add_run([1], -3, 0, True)
    with pytest.raises(ValueError, match="empty"):
        batch.add_run([], 0, 0, True)


@pytest.mark.parametrize("capacity, n_seq_max", [(0, 1), (4, 0), (-2, 3)])
def test_bad_sizes_are_refused(capacity, n_seq_max):
    with pytest.raises(ValueError, match="valid is an integer >= 1"):
        LlamaBatch(capacity, n_seq_max)


def test_clear_reuses_the_allocation(batch):
    before = (batch.native.token.ctypes.data, batch.native.seq_id.ctypes.data)
    batch.add_run([1, 2, 3], 0, 0, True)
    batch.clear()
    assert batch.n_tokens == 0 and batch.native.struct.n_tokens == 0
    batch.add_run([4, 5], 3, 1, False)
    assert (batch.native.token.ctypes.data, batch.native.seq_id.ctypes.data) == before
    assert rows(batch) == [(4, 3, 1, 1, 0), (5, 4, 1, 1, 0)]


def test_close_is_idempotent_and_final():
    b = LlamaBatch(4, 1)
    b.close()
    b.close()
    assert b.closed
    with pytest.raises(ValueError, match="closed"):
        b.add(1, 0, 0, True)


runs = st.lists(
    st.tuples(
        st.lists(st.integers(0, 49151), min_size=1, max_size=5),
        st.integers(0, 4000),
        st.integers(0, 3),
        st.booleans(),
    ),
    max_size=6,
)


@settings(max_examples=50, deadline=None)
@given(runs)
def test_any_sequence_of_runs_lands_row_by_row(spec):
    with LlamaBatch(16, 4) as b:
        expected = []
        for tokens, pos0, seq, logits in spec:
            if len(tokens) > b.free:
                with pytest.raises(ValueError):
                    b.add_run(tokens, pos0, seq, logits)
                continue
            last = b.add_run(tokens, pos0, seq, logits)
            assert last == len(expected) + len(tokens) - 1
            expected += [
                (t, pos0 + k, 1, seq, int(logits and k == len(tokens) - 1))
                for k, t in enumerate(tokens)
            ]
        assert rows(b) == expected
