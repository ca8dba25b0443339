"""Issue 10, fault 4: no KV cache that can never be used; its size known in advance.

``BatchGenerator.estimate_memory`` (formula of llama.cpp's ``llama_kv_cache``
constructor, see ``llamabatch/llamacpp/kv_size.py``) is checked against what llama.cpp
itself logs when it allocates the cache ("llama_kv_cache: size = X MiB"), which it
prints with two decimals: the tolerance is that rounding, 0.005 MiB.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

LOGGED = """
    import os, llama_cpp
    from llamabatch import BatchGenerator
    llm = llama_cpp.Llama(os.environ["MODEL"], n_ctx=512, n_threads=1, verbose=True)
    est = BatchGenerator.estimate_memory(llm, slots={slots}, n_ctx_seq={n_ctx_seq})
    print("ESTIMATE", est.total_bytes, est.bytes_per_slot, est.exact, flush=True)
    with BatchGenerator(llm, slots={slots}, n_ctx_seq={n_ctx_seq}, max_tokens=2) as gen:
        gen.complete_many(["Hi"] * {slots})
        print("STATS", gen.stats.kv_bytes, flush=True)
"""


@pytest.mark.parametrize("slots,n_ctx_seq", [(4, 512), (2, 300), (3, 1024)])
def test_the_estimate_is_what_llama_cpp_allocates(model_path, slots, n_ctx_seq):
    env = dict(os.environ, MODEL=str(model_path))
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOGGED.format(slots=slots, n_ctx_seq=n_ctx_seq))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    total, per_slot, exact = re.search(r"ESTIMATE (\d+) (\d+) (\w+)", result.stdout).groups()
    # the Llama's own cache is logged first (1/1 seqs), the batch context's after it
    logged = re.findall(
        r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +\d+ "
        r"layers, +(\d+)/\d+ seqs\)",
        result.stderr,
    )
    mib, cells, seqs = logged[-1]
    padded = -(-n_ctx_seq // 256) * 256
    assert (int(cells), int(seqs)) == (padded, slots)
    assert abs(int(total) / 2**20 - float(mib)) <= 0.005
    assert int(per_slot) * slots == int(total) and exact == "True"
    assert f"STATS {total}" in result.stdout


def test_estimate_from_the_file_equals_estimate_from_the_llama(llm, model_path):
    from_file = BatchGenerator.estimate_memory(str(model_path), slots=4, n_ctx_seq=512)
    from_llm = BatchGenerator.estimate_memory(llm, slots=4, n_ctx_seq=512)
    assert from_file == from_llm
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 values, F16 K and V
    assert from_llm.bytes_per_token == 30 * 2 * (3 * 64 * 2)
    assert from_llm.bytes_per_slot == from_llm.bytes_per_token * 512


def test_estimate_refuses_bad_sizes_and_paths(llm, tmp_path):
    with pytest.raises(ValueError, match=r"slots=0 is out of range"):
        BatchGenerator.estimate_memory(llm, slots=0)
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ValueError, match=r"could not open it as a GGUF model"):
        BatchGenerator.estimate_memory(str(bad), slots=2, n_ctx_seq=256)


def test_default_n_ctx_seq_follows_a_short_llama(model_path):
    import llama_cpp

    small = llama_cpp.Llama(model_path=str(model_path), n_ctx=512, n_threads=1, verbose=False)
    try:
        with BatchGenerator(
            small, slots=4, max_tokens=2, sampling=SamplingParams(temperature=0)
        ) as gen:
            assert gen.config.n_ctx_seq == 512
            gen.complete_many(["Hi", "Hello", "Hey", "Yo"])
            assert gen.limits.n_ctx_seq == 512  # not 4096: no item could use more
            est = BatchGenerator.estimate_memory(small, slots=4, n_ctx_seq=512)
            assert gen.stats.kv_bytes == est.total_bytes
    finally:
        small.close()
