"""The test suite's offload switch (shared test helper): ``LLAMABATCH_TEST_N_GPU_LAYERS``,
the layers every fixture's ``Llama`` puts on the GPU (default 0; -1 = all). With it set,
any test on the ``llm``, ``pair`` or ``reference`` fixtures runs offloaded;
tests/gpu_path/ runs only with -1."""

from __future__ import annotations

import os

N_GPU_LAYERS = int(os.environ.get("LLAMABATCH_TEST_N_GPU_LAYERS", "0"))
