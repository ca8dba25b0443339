"""Session fixtures for the real-model tests (SmolLM2-135M-Instruct Q4_1).

``LLAMABATCH_TEST_GGUF`` names the GGUF file; without it the default model is used
(fetched once into the user cache by :func:`llamabatch.model.default_model_path`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Ray (tests/ray) binds its local cluster to 127.0.0.1 only when it is told this is no
# multi-node cluster (ray._private.services.get_node_ip_address); without it, Ray turns
# 127.0.0.1 into the machine's own network address. Read when ray is first imported, and
# inherited by the jobs the tests start.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from offload import N_GPU_LAYERS  # noqa: E402 - the offload switch (tests/offload.py)

# The software-GPU tier runs only offloaded, on a GPU build (.ci/run runs it with
# scripts/build-vulkan's venv); the plain run leaves it out.
collect_ignore = [] if N_GPU_LAYERS else ["gpu_path"]


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The test model's GGUF file."""
    env = os.environ.get("LLAMABATCH_TEST_GGUF")
    if env:
        return Path(env)
    from llamabatch.model import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def llm(model_path):
    """One ``llama_cpp.Llama`` on the test model for the whole session (2048 tokens, 2 threads)."""
    import llama_cpp

    model = llama_cpp.Llama(
        model_path=str(model_path),
        n_ctx=2048,
        n_threads=2,
        n_gpu_layers=N_GPU_LAYERS,
        verbose=False,
    )
    yield model
    model.close()


@pytest.fixture(scope="session")
def reference(model_path):
    """A ``Llama(logits_all=True)`` on the test model, made only when a cross-path
    comparison meets a divergence (``tests/agreement.py``)."""
    from agreement import Reference

    ref = Reference(model_path, n_ctx=2048, kwargs={"n_gpu_layers": N_GPU_LAYERS})
    yield ref
    ref.close()


# -- hypothesis profiles for the property tests (tests/test_properties.py) -------------
# HYPOTHESIS_PROFILE=ci (default: all property tests in under a minute on 2 cores) or
# dev (more examples and longer stateful runs, for a local hunt: about 3 minutes).
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=1000,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture()
def pair(model_path):
    """Two fresh ``Llama``s on the test model, alike: one to use, one left untouched."""
    import llama_cpp

    made = [
        llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=512,
            n_threads=1,
            seed=42,
            n_gpu_layers=N_GPU_LAYERS,
            verbose=False,
        )
        for _ in range(2)
    ]
    yield made
    for llm in made:
        llm.close()
