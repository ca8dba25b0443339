"""The host cache finds states by bisection over their sorted tokens; it must answer exactly
as the rules say, which a scan of every state states plainly (the model below)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch.engine.backend import SeqState
from llamabatch.engine.cache import HostCache, common_prefix


def shared(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def serves(tokens, floor, n) -> bool:
    return n <= 0 or n >= len(tokens) or n >= floor


class Model:
    """The rules, one state at a time: ``states`` in least-recently-used order."""

    def __init__(self, limit: int) -> None:
        self.limit, self.states = limit, []  # [tokens, state, n_bytes, floor]

    def covers(self, tokens) -> bool:
        n = len(tokens)
        return any(
            len(t) >= n and shared(t, tokens) == n and serves(t, f, n) for t, _, _, f in self.states
        )

    def add(self, tokens, state, n_bytes, floor) -> bool:
        key = tuple(tokens)
        if not key or n_bytes > self.limit or self.covers(key):
            return False
        self.states = [
            s
            for s in self.states
            if not (shared(s[0], key) == len(s[0]) and serves(key, floor, len(s[0])))
        ]
        while self.states and sum(s[2] for s in self.states) + n_bytes > self.limit:
            self.states.pop(0)
        self.states.append([key, state, n_bytes, floor])
        return True

    def best(self, prompt):
        found, limit = None, len(prompt) - 1
        for s in reversed(self.states):  # the most recently used first: it wins ties
            n = min(shared(s[0], prompt), limit)
            if n <= 0 or not serves(s[0], s[3], n):
                continue
            if found is None or n > found[1]:
                found = (s, n)
        if found is None:
            return None
        self.states.remove(found[0])
        self.states.append(found[0])
        return found[0][1], found[1]


tokens = st.lists(st.integers(0, 3), max_size=9)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), tokens, st.integers(1, 70), st.sampled_from([0, 0, 1, 2, 4, 9])),
        st.tuples(st.just("covers"), tokens),
        st.tuples(st.just("best"), tokens),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.sampled_from([60, 150, 10**6]))
def test_the_host_cache_answers_as_a_scan_of_every_state(steps, limit):
    cache, model = HostCache(limit), Model(limit)
    for k, (op, *args) in enumerate(steps):
        if op == "add":
            toks, n_bytes, floor = args
            assert cache.add(toks, SeqState(k, n_bytes), floor) == model.add(
                toks, k, n_bytes, floor
            )
        elif op == "covers":
            assert cache.covers(args[0]) == model.covers(args[0])
        else:
            got = cache.best(*args)
            assert (None if got is None else (got[0].state.data, got[1])) == model.best(*args)
        assert len(cache) == len(model.states)
        assert cache.n_bytes == sum(s[2] for s in model.states)


@given(tokens, tokens, st.booleans(), st.booleans())
def test_common_prefix_of_lists_tuples_and_ranges(a, b, a_tuple, b_tuple):
    want = shared(a, b)
    x = tuple(a) if a_tuple else a
    y = tuple(b) if b_tuple else b
    assert common_prefix(x, y) == want
    assert common_prefix(range(len(a)), range(len(b))) == min(len(a), len(b))
    long = list(range(1000))
    assert common_prefix(long, long[:700] + [-1]) == 700
