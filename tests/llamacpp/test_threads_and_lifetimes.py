"""Issue 5 — threads and lifetimes on the real model.

Threads: the ``Llama``'s own context (user calls, and items completed alone) and the
batch context share one model; :func:`llamabatch.llm_lock` serializes every use of
llama.cpp per ``Llama``. Lifetimes: dropping the ``Llama``, closing it, closing the
generator twice, using it closed, leaving it open at interpreter exit.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest

import llamabatch
from llamabatch import BatchGenerator, SamplingParams
from llamabatch.errors import GeneratorClosed

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)


@pytest.fixture
def small_llm(model_path):
    """A Llama of its own (not the session's), for tests that drop or close it."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=512, n_threads=2, verbose=False)
    yield llm
    llm.close()


# -- threads ------------------------------------------------------------------------------
def test_llm_lock_is_one_reentrant_lock_per_llama_shared_by_its_generators(llm, small_llm):
    lock = llamabatch.llm_lock(llm)
    assert llamabatch.llm_lock(llm) is lock and llamabatch.llm_lock(small_llm) is not lock
    with BatchGenerator(llm, slots=2) as a, BatchGenerator(llm, slots=2) as b:
        assert a.lock is lock and b.lock is lock
    with lock, lock:  # reentrant
        pass
    with pytest.raises(TypeError, match="needs a llama_cpp.Llama"):
        llamabatch.llm_lock(42)


def test_a_generator_waits_while_another_thread_holds_the_llm_lock(llm):
    done = threading.Event()
    with BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=2, sampling=GREEDY) as gen:

        def work() -> None:
            gen.complete_many(["Apples are", "Pears are", "Plums are"])
            done.set()

        with llamabatch.llm_lock(llm):
            worker = threading.Thread(target=work)
            worker.start()
            assert not done.wait(0.5)  # blocked on the lock, not racing the Llama
        worker.join(60)
    assert done.is_set()


def test_two_threads_alternating_llm_calls_and_complete_many_match_a_serial_run(llm):
    """2 threads x 20 calls: ``llm.create_completion`` (under the lock) and
    ``complete_many`` on one shared generator (2 items batched + 1 alone, through the
    ``Llama``'s own context). Every prompt that uses the ``Llama``'s context starts with
    its own first token, so no call reuses another's cached prefix: greedy results are
    then the same whatever the interleaving."""
    own = {0: "Apples are", 1: "Cherries are"}
    # the third prompt of each is too long for a slot (n_ctx_seq 256): completed alone
    groups = {
        0: ["Bananas are", "Grapes are", "Lemons are sour. " * 60 + "Lemons are"],
        1: ["Dates are", "Kiwis are", "Mangoes are sweet. " * 60 + "Mangoes are"],
    }
    with BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=4, sampling=GREEDY) as gen:
        lock = llamabatch.llm_lock(llm)

        def call_llm(k: int) -> str:
            with lock:
                return llm.create_completion(own[k], max_tokens=4, temperature=0)["choices"][0][
                    "text"
                ]

        def call_gen(k: int) -> list[tuple[str, str]]:
            return [(c.text, c.path) for c in gen.complete_many(groups[k])]

        serial = {k: (call_llm(k), call_gen(k)) for k in (0, 1)}
        got: dict[int, list] = {0: [], 1: []}
        errors: list[BaseException] = []

        def worker(k: int) -> None:
            try:
                for i in range(20):
                    got[k].append(call_llm(k) if i % 2 == 0 else call_gen(k))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert not errors, errors
    for k in (0, 1):
        assert got[k] == [serial[k][i % 2] for i in range(20)]
        assert [path for _, path in serial[k][1]] == ["batch", "batch", "alone"]


# -- lifetimes ----------------------------------------------------------------------------
def test_dropping_the_llama_keeps_it_alive_until_the_generator_is_closed(model_path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=512, n_threads=2, verbose=False)
    prompts = ["Apples are", "Pears are", "Plums are"]
    gen = BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=4, sampling=GREEDY)
    first = [c.token_ids for c in gen.complete_many(prompts)]
    ref = weakref.ref(llm)
    del llm
    gc.collect()
    assert ref() is not None  # the generator holds the Llama
    assert [c.token_ids for c in gen.complete_many(prompts)] == first
    gen.close()
    del gen
    gc.collect()
    assert ref() is None  # and nothing else keeps it


def test_a_dropped_open_generator_frees_everything(model_path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=512, n_threads=2, verbose=False)
    gen = BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=2, sampling=GREEDY)
    gen.complete_many(["Apples are", "Pears are"])
    ref = weakref.ref(llm)
    del gen, llm
    gc.collect()
    assert ref() is None


def test_closing_the_llama_first_makes_the_generator_report_closed(small_llm):
    gen = BatchGenerator(small_llm, slots=2, n_ctx_seq=256, max_tokens=2, sampling=GREEDY)
    gen.complete_many(["Apples are", "Pears are"])
    ctx = gen.backend.batch_context
    small_llm.close()  # frees the batch context first
    assert ctx.closed
    with pytest.raises(GeneratorClosed, match="Llama of this BatchGenerator was closed"):
        gen.complete_many(["Apples are", "Pears are"])
    gen.close()
    gen.close()


def test_close_twice_and_use_after_close_raise_generator_closed(llm):
    prompts = ["Apples are", "Pears are", "Plums are", "Figs are"]
    gen = BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=2, sampling=GREEDY)
    groups = gen.iter_groups(prompts)
    assert [c.index for c in next(groups)] == [0, 1]
    gen.close()
    gen.close()
    assert gen.closed
    with pytest.raises(GeneratorClosed, match="closed"):  # between two groups
        next(groups)
    with pytest.raises(GeneratorClosed):
        gen.complete_many(prompts)
    with pytest.raises(ValueError):  # GeneratorClosed is one
        list(gen.iter_groups(prompts))
    with BatchGenerator(llm, slots=2) as other:
        pass
    assert other.closed


EXIT_SCRIPT = textwrap.dedent("""
    import sys, llama_cpp
    from llamabatch import BatchGenerator, SamplingParams
    llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False)
    gen = BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=2,
                         sampling=SamplingParams(temperature=0))
    groups = gen.iter_groups(["Apples are", "Pears are", "Plums are", "Figs are"])
    print([c.path for c in next(groups)])   # a group done, the next one pending
    if sys.argv[2] == "llm-closed":
        llm.close()                         # the generator stays open
    print("exiting", flush=True)
""")

#: The same script without llamabatch: what llama-cpp-python itself writes to stderr.
#: On 0.3.16 that is more than nothing: its log callback maps llama.cpp's log levels
#: with an older enum, so llama.cpp's warnings pass ``verbose=False`` (e.g. ``llama_context:
#: n_ctx_per_seq (512) < n_ctx_train (8192) ...`` for every context, the batch context's
#: too); and its ``_utils`` opens /dev/null at import and never closes it (a
#: ResourceWarning, shown here because every warning is enabled).
BARE_SCRIPT = textwrap.dedent("""
    import sys, llama_cpp
    llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False)
    print(len(llm.create_completion("Apples are", max_tokens=2, temperature=0)["choices"]))
    if sys.argv[2] == "llm-closed":
        llm.close()
    print("exiting", flush=True)
""")


def run_script(script: str, model_path, mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="default")  # every warning shown, once
    return subprocess.run(
        [sys.executable, "-c", script, str(model_path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def line_kind(line: str) -> str:
    """A stderr line with its numbers blanked: llama.cpp logs each context's own sizes."""
    return re.sub(r"[0-9]+", "N", line)


@pytest.mark.parametrize("mode", ["open", "llm-closed"])
def test_interpreter_exit_with_an_open_generator_is_quiet(model_path, mode):
    bare = run_script(BARE_SCRIPT, model_path, mode)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.splitlines() == ["1", "exiting"]
    proc = run_script(EXIT_SCRIPT, model_path, mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['batch', 'batch']", "exiting"]
    theirs = {line_kind(line) for line in bare.stderr.splitlines()}
    assert not any("Exception ignored" in line or "Traceback" in line for line in theirs), (
        bare.stderr
    )  # then this test could not see ours
    ours = [line for line in proc.stderr.splitlines() if line_kind(line) not in theirs]
    assert ours == [], proc.stderr  # no "Exception ignored", no "NoneType ..."
