"""``import llamabatch, llamabatch.testing`` works where llama-cpp-python is missing.

A fresh interpreter blocks every ``llama_cpp`` import, then runs a small job on the fake
backend and checks that no native-facing module (nor hypothesis) was loaded.
"""

from __future__ import annotations

import subprocess
import sys

from without_llama_cpp import WITHOUT_LLAMA_CPP

SCRIPT = (
    WITHOUT_LLAMA_CPP
    + r"""
import llamabatch
import llamabatch.testing
from llamabatch.testing import FakeBackend

fake = FakeBackend({"hi": "yo", "ok": "sure"})
gen = llamabatch.BatchGenerator(backend=fake, slots=2, max_tokens=8)
out = gen.complete_many(["hi", "ok", "hi"])
assert [(c.text, c.path) for c in out] == [("yo", "batch"), ("sure", "batch"),
                                           ("yo", "batch")], out
loaded = [m for m in sys.modules if m.split(".")[0] in ("llama_cpp", "hypothesis")
          or m.startswith(("llamabatch._ffi", "llamabatch.llamacpp.backend"))]
assert not loaded, loaded
print("ok")
"""
)


def test_import_and_a_fake_job_without_llama_cpp() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
