"""A scripted clock for the tests of timed code (``from clocks import scripted``: the
root conftest's folder is on ``sys.path``): timings are given, never measured."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def scripted(
    seconds: Iterable[float], first: Iterable[float] = (), last: Iterable[float] = ()
) -> Callable[[], float]:
    """A clock reading ``first``, then (start, end) pairs ``seconds`` apart, one pair per
    timed pass, then ``last``."""
    values, t = list(first), 0.0
    for d in seconds:
        values += [t, t + d]
        t += d + 1.0
    it = iter([*values, *last])
    return lambda: next(it)
