"""The device check on the tiny random models (dense, hybrid and recurrent memories):
batched equals alone on the CPU, every step of the probe (mixed step, refill, a prompt past
n_ubatch) included."""

from __future__ import annotations

import pytest

from llamabatch.engine.device_check import check_device, probe_n_batch
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "lfm2", "gemma3", "qwen3"])
def test_batched_equals_alone_on_the_tiny_architectures(arch, tiny_models_dir):
    import llama_cpp

    path = tiny_models_dir / f"{arch}-dense.gguf"
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_threads=2, verbose=False)
    try:
        backend = LlamaBackend(llm)
        check = check_device(backend, backend.open(3, 256, probe_n_batch(3, 512)))
        backend.close()
    finally:
        llm.close()
    assert check.ok and check.failed is None and check.counts == (2, 3), check
    assert check.rows == 28, check  # 11 rows with 2 sequences, 17 with 3
