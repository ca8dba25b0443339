"""Where the architecture tests find their models.

``LLAMABATCH_TINY_MODELS`` names the directory ``scripts/make-tiny-models`` printed (it
holds ``ARCH-dense.gguf`` per architecture); ``LLAMABATCH_GEMMA3_GGUF`` names the
gemma-3-270m file ``scripts/fetch-gemma3`` printed. ``.ci/run`` sets both. When one is
unset the tests that need it fail under ``CI=true`` (CI must never skip them) and are
skipped elsewhere, with the command that makes the models as the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _from_env(var: str, how: str) -> Path:
    value = os.environ.get(var)
    if not value:
        message = f"{var} is not set: run `{how}` and export {var} to what it prints"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the architecture tests, but {message}")
        pytest.skip(f"architecture models not made here: {message}")
    path = Path(value)
    if not path.exists():
        pytest.fail(f"{var}={value} does not exist; run `{how}` to make it")
    return path


@pytest.fixture(scope="session")
def tiny_models_dir() -> Path:
    """Directory of the random models of ``scripts/make-tiny-models``."""
    return _from_env("LLAMABATCH_TINY_MODELS", "scripts/make-tiny-models")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """gemma-3-270m Q4_K_M (sliding window of 512 tokens), from ``scripts/fetch-gemma3``."""
    return _from_env("LLAMABATCH_GEMMA3_GGUF", ".venv/bin/python scripts/fetch-gemma3")
