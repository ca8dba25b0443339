"""The device check on the tiny random models (dense, hybrid and recurrent memories):
batched equals alone on the CPU, the mixed step included."""

from __future__ import annotations

import pytest

from llamabatch.engine.device_check import check_device
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "lfm2", "gemma3", "qwen3"])
def test_batched_equals_alone_on_the_tiny_architectures(arch, tiny_models_dir):
    import llama_cpp

    path = tiny_models_dir / f"{arch}-dense.gguf"
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_threads=2, verbose=False)
    try:
        backend = LlamaBackend(llm)
        check = check_device(backend, backend.open(3, 256, 512))
        backend.close()
    finally:
        llm.close()
    assert check.ok and check.rows == 8, check
