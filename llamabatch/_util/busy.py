"""Whether other work shared the CPU with llama.cpp's threads, and what to change then:
:func:`load_average` and :func:`busy_cpu_warning` (``complete``, ``doctor``, ``tune`` and
``BatchGenerator`` say it alike)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

#: A 1-minute load average above this many times the core count means other work shares
#: the cores with llama.cpp's threads (the job's own threads count once per core).
BUSY_LOAD_PER_CORE = 1.5
#: Seconds of generation after which a busy CPU is worth a warning (the load average is
#: a 1-minute mean: a shorter run says little).
BUSY_MIN_S = 5.0


def load_average() -> float | None:
    """The 1-minute load average (``os.getloadavg``), or ``None`` where there is none."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # Windows has no load average
        return None


def is_busy(load: float | None, n_cores: int | None) -> bool:
    """``load`` is above :data:`BUSY_LOAD_PER_CORE` times ``n_cores`` (unknown: not busy)."""
    return load is not None and bool(n_cores) and load > BUSY_LOAD_PER_CORE * (n_cores or 1)


def threads_hint(threads: int | None, threads_as: str = "--threads {}") -> str:
    """What to change about the threads on a busy CPU, given the ``threads`` in force
    (``None``: llama-cpp-python's default); ``threads_as`` spells the option for a
    thread count (``"--threads {}"`` on the command line, ``"Llama(n_threads={})"``)."""
    one = threads_as.format(1)
    if threads is None:
        return f"try {one} (or fewer threads than the idle cores)"
    if threads <= 1:
        return (
            f"it already runs with {one}: run it when the other work is done, "
            "or on a machine of its own"
        )
    return f"try {threads_as.format(max(1, threads // 2))} or {one} (fewer than the idle cores)"


def busy_cpu_warning(
    load: float | None,
    n_cores: int | None,
    threads: int | None = None,
    *,
    threads_as: str = "--threads {}",
    during: str = "the job",
) -> str | None:
    """What to say when the CPU was busy with other work ``during`` a run, else ``None``.

    llama.cpp's threads spin-wait on each other at every step: with more runnable
    threads than cores its default threads collapse (20 example items took 104 s with the
    default threads and 10 s with ``--threads 1`` at a load of 3-5 on 2 cores). The
    hint (:func:`threads_hint`) depends on ``threads``, the thread count in force.
    """
    if not is_busy(load, n_cores):
        return None
    return (
        f"the CPU was busy during {during} (load average {load:.1f} on {n_cores} cores): "
        "llama.cpp's threads wait on each other when other work shares the cores, and "
        f"its tokens/s collapses; {threads_hint(threads, threads_as)}"
    )


_told_by_caller = 0  # how many told_by_caller blocks are open


@contextmanager
def told_by_caller() -> Iterator[None]:
    """Within it, a ``BatchGenerator`` leaves the busy warning to its caller (the command
    line, which says it once in its flags' terms); it nests, and any thread sees it."""
    global _told_by_caller
    _told_by_caller += 1
    try:
        yield
    finally:
        _told_by_caller -= 1


def told_elsewhere() -> bool:
    """A :func:`told_by_caller` block is open."""
    return _told_by_caller > 0
