"""Issue 10, fault 1: a value llama.cpp asserts on never reaches it.

``llama_context::output_reserve`` asserts ``max(n_outputs, n_seq_max) <= n_outputs_max``
(``= n_batch``), so a context with ``slots > n_batch`` killed the process (SIGABRT).
Each real-model case runs in a subprocess: an abort fails the test instead of pytest.
The boundary is tested both ways: llama.cpp itself aborts at the largest invalid
combination and works at the smallest valid one, and llamabatch refuses the first
with a ValueError and batches with the second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llamabatch import _ffi
from llamabatch.llamacpp.limits import MAX_N_CTX, check_context

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tag_prompts.jsonl"
FAST = ("--max-tokens", "2", "--n-ctx-seq", "512", "--temperature", "0", "--threads", "1")

real_model = pytest.mark.real_model


def run_py(code: str, model_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MODEL=str(model_path))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# -- the pure rule -------------------------------------------------------------------------


@pytest.mark.parametrize("slots,n_batch", [(2, 1), (3, 2), (4, 3), (8, 7), (64, 63)])
def test_slots_over_n_batch_is_refused_naming_both(slots, n_batch):
    with pytest.raises(
        ValueError,
        match=rf"slots={slots} with n_batch={n_batch} .* valid "
        rf"is n_batch >= {slots}, or slots <= {n_batch}",
    ):
        check_context(slots, 256, n_batch, max_slots=256)


@pytest.mark.parametrize("slots,n_batch", [(1, 1), (2, 2), (4, 4), (8, 8), (4, 512)])
def test_slots_up_to_n_batch_pass(slots, n_batch):
    check_context(slots, 256, n_batch, max_slots=256)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(slots=0), r"slots=0 is out of range: valid is an integer in \[1, 256\]"),
        (dict(slots=257), r"slots=257 .*\[1, 256\]"),
        (dict(n_batch=0), r"n_batch=0 is out of range"),
        (dict(n_ubatch=600), r"n_ubatch=600 .*\[1, n_batch=512\]"),
        (dict(n_ctx_seq=0), r"n_ctx_seq=0 is out of range"),
        (dict(n_ctx_seq=MAX_N_CTX // 4 + 1), rf"n_ctx_seq={MAX_N_CTX // 4 + 1} .*slots=4"),
        (dict(n_threads=0), r"n_threads=0 .*\[1, 512\]"),
        (dict(n_threads_batch=513), r"n_threads_batch=513"),
    ],
)
def test_each_context_value_is_checked(kwargs, match):
    args = dict(slots=4, n_ctx_seq=256, n_batch=512) | kwargs
    extra = {k: args.pop(k) for k in ("n_ubatch", "n_threads", "n_threads_batch") if k in args}
    with pytest.raises(ValueError, match=match):
        check_context(args["slots"], args["n_ctx_seq"], args["n_batch"], max_slots=256, **extra)


# -- llama.cpp itself: the rule is real ----------------------------------------------------

RAW_CONTEXT = """
    import os, llama_cpp
    from llama_cpp import llama_cpp as C
    llm = llama_cpp.Llama(os.environ["MODEL"], n_ctx=256, n_threads=1, verbose=False)
    p = C.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = 256 * {slots}, {n_batch}, {n_batch}, {slots}
    p.kv_unified, p.n_threads, p.n_threads_batch = False, 1, 1
    ctx = C.llama_init_from_model(llm._model.model, p)
    print("created", bool(ctx), "n_batch", C.llama_n_batch(ctx) if ctx else 0)
    C.llama_free(ctx)
"""


def smallest_n_batch(model_path) -> int:
    """The ``n_batch`` llama.cpp uses when 1 is asked: 1, or 64 in the llama.cpp of
    llama-cpp-python 0.3.16 (it raises an ``n_batch`` below ``GGML_KQ_MASK_PAD`` = 64)."""
    result = run_py(RAW_CONTEXT.format(slots=1, n_batch=1), model_path)
    assert result.returncode == 0, result.stderr[-2000:]
    return int(result.stdout.split()[-1])


@real_model
def test_llama_cpp_aborts_at_the_largest_invalid_combination(model_path):
    """Without llamabatch's guard, slots = n_batch + 1 kills the process.

    Where llama.cpp raises every ``n_batch`` to at least its ceiling of sequences
    (0.3.16: 64 and ``llama_max_parallel_sequences()`` = 64), no slot count reaches the
    assert: there, the most slots llama.cpp allows are created with ``n_batch=1``, and
    llamabatch's rule (``slots <= n_batch`` as asked) is stricter than needed but safe.
    """
    floor = smallest_n_batch(model_path)
    ceiling = _ffi.load().max_parallel_sequences()
    if floor + 1 > ceiling:
        result = run_py(RAW_CONTEXT.format(slots=ceiling, n_batch=1), model_path)
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"created True n_batch {floor}" in result.stdout
        return
    result = run_py(RAW_CONTEXT.format(slots=floor + 1, n_batch=floor), model_path)
    assert result.returncode == -signal.SIGABRT, result.stderr[-2000:]
    assert "n_outputs_max <= cparams.n_outputs_max" in result.stderr


@real_model
def test_llama_cpp_creates_the_smallest_valid_combination(model_path):
    result = run_py(RAW_CONTEXT.format(slots=2, n_batch=2), model_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "created True" in result.stdout


# -- llamabatch: refused as a ValueError, or batched -----------------------------------------

GENERATOR = """
    import os, llama_cpp
    from llamabatch import BatchGenerator, SamplingParams
    llm = llama_cpp.Llama(os.environ["MODEL"], n_ctx=512, n_threads=1, verbose=False)
    try:
        gen = BatchGenerator(llm, slots={slots}, n_batch={n_batch}, max_tokens=3,
                             sampling=SamplingParams(temperature=0))
    except ValueError as exc:
        print("ValueError:", exc)
    else:
        with gen:
            out = gen.complete_many(["Name a color."] * {slots})
        print("paths", sorted({{c.path for c in out}}), "ok", all(c.ok for c in out))
"""


@real_model
@pytest.mark.parametrize("slots,n_batch", [(2, 1), (3, 2), (8, 7)])
def test_generator_refuses_slots_over_n_batch(model_path, slots, n_batch):
    result = run_py(GENERATOR.format(slots=slots, n_batch=n_batch), model_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"ValueError: slots={slots} with n_batch={n_batch} is out of range" in result.stdout


@real_model
@pytest.mark.parametrize("slots,n_batch", [(2, 2), (4, 4)])
def test_generator_batches_at_slots_equal_n_batch(model_path, slots, n_batch):
    result = run_py(GENERATOR.format(slots=slots, n_batch=n_batch), model_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "paths ['batch'] ok True" in result.stdout


@real_model
def test_cli_slots_over_n_batch_exits_2(model_path, tmp_path):
    argv = [
        sys.executable,
        "-m",
        "llamabatch",
        "complete",
        str(EXAMPLES),
        "-o",
        str(tmp_path / "o.jsonl"),
        "--model",
        str(model_path),
        "--slots",
        "2",
        "--n-batch",
        "1",
        *FAST,
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "slots=2 with n_batch=1 is out of range" in result.stderr
    assert "Traceback" not in result.stderr
