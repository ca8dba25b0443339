"""The software-GPU tier: llamabatch with every layer offloaded to a Vulkan device.

Run on a Vulkan build of llama-cpp-python (``bash scripts/build-vulkan`` makes
``.venv-vulkan``); on a machine without a GPU the device is Mesa's lavapipe, which
ggml-vulkan uses only with ``GGML_VK_VISIBLE_DEVICES=0``::

    GGML_VK_VISIBLE_DEVICES=0 LLAMABATCH_TEST_N_GPU_LAYERS=-1 \\
        .venv-vulkan/bin/python -m pytest tests/gpu_path -ra

lavapipe runs the real Vulkan kernels on the CPU (~0.4 tokens/s on SmolLM2), so every
test is short: prompts of at most ~40 tokens, at most 8 reply tokens, 2-3 slots. Its
logits are fp16-like: replies are compared within the Vulkan build (batched against
alone), up to a near tie, never against the CPU's.
"""

from __future__ import annotations

import os

import pytest
from offload import N_GPU_LAYERS

HOW = (
    "run `bash scripts/build-vulkan`, then `GGML_VK_VISIBLE_DEVICES=0 "
    "LLAMABATCH_TEST_N_GPU_LAYERS=-1 .venv-vulkan/bin/python -m pytest tests/gpu_path`"
)


def _gpus() -> list:
    import llama_cpp

    from llamabatch._ffi import sysinfo

    if not llama_cpp.llama_supports_gpu_offload():
        return []
    return [d for d in sysinfo.devices() if d.is_gpu]


@pytest.fixture(scope="session", autouse=True)
def gpu_device():
    """The GPU device every layer goes to; the tier fails (it never skips) without one."""
    if N_GPU_LAYERS != -1:
        pytest.fail(f"tests/gpu_path runs with every layer offloaded: {HOW}")
    gpus = _gpus()
    if not gpus:
        pytest.fail(
            "this llama-cpp-python has no GPU device "
            f"(GGML_VK_VISIBLE_DEVICES={os.environ.get('GGML_VK_VISIBLE_DEVICES')!r}): {HOW}"
        )
    return gpus[0]


@pytest.fixture(scope="session")
def tiny_models_dir():
    """The random models of ``scripts/make-tiny-models`` (``LLAMABATCH_TINY_MODELS``)."""
    from pathlib import Path

    value = os.environ.get("LLAMABATCH_TINY_MODELS")
    if not value or not Path(value).is_dir():
        pytest.fail(
            f"LLAMABATCH_TINY_MODELS={value!r} is not a directory: run "
            "`scripts/make-tiny-models` and export it to what it prints"
        )
    return Path(value)
