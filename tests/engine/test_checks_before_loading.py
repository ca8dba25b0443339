"""Every plain parameter of ``BatchGenerator`` is checked before llama.cpp is touched:
a bad ``min_copy_tokens`` or ``cache_ram_mib`` is named even when ``llm`` is no
``Llama`` at all, and in a fresh interpreter no native module gets loaded for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llamabatch import BatchGenerator


@pytest.mark.parametrize(
    "kwargs, named",
    [({"min_copy_tokens": 0}, "min_copy_tokens=0"), ({"cache_ram_mib": -1}, "cache_ram_mib=-1")],
)
def test_bad_values_are_named_before_the_llama_is_looked_at(kwargs, named) -> None:
    with pytest.raises(ValueError, match=named):
        BatchGenerator(object(), **kwargs)


SCRIPT = r"""
import sys
import llamabatch
try:
    llamabatch.BatchGenerator(object(), cache_ram_mib=-1)
except ValueError as exc:
    assert "cache_ram_mib" in str(exc), exc
loaded = [m for m in sys.modules if m.split(".")[0] == "llama_cpp"
          or m.startswith(("llamabatch._ffi", "llamabatch.llamacpp"))]
assert not loaded, loaded
print("ok")
"""


def test_no_native_module_is_loaded_to_refuse_them() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_model_path_in_place_of_a_llama_says_how_to_load_it(tmp_path) -> None:
    from pathlib import Path

    for path in ("model.gguf", Path("model.gguf")):
        with pytest.raises(TypeError, match="llm is a path") as info:
            BatchGenerator(path)
        assert "llama_cpp.Llama(model_path='model.gguf'" in str(info.value)
    with pytest.raises(TypeError, match="llm is dict, not a loaded model"):
        BatchGenerator({"model": "x"})
