"""benchmarks/gpu/: the random-model writer, ``run``'s refusals, ``prepare``'s trimming.

Nothing here builds llama.cpp: ``run`` is stopped at its first step (the toolchain check)
by a PATH that lacks a tool, and ``prepare``'s trimming runs on a made-up sdist tree.
The random-model test needs llama.cpp's ``gguf`` package: from ``$LLAMA_CPP_SRC/gguf-py``,
else the sdist that ``scripts/make-tiny-models`` unpacks into the user cache (CI runs
it first), else an installed ``gguf``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_scripts import BENCHMARKS, load_script

GPU = BENCHMARKS / "gpu"


def gguf_py() -> Path | None:
    """A folder holding llama.cpp's ``gguf`` package, or None if none is found."""
    env = os.environ.get("LLAMA_CPP_SRC")
    candidates = [Path(env) / "gguf-py"] if env else []
    try:
        from importlib.metadata import version

        v = version("llama-cpp-python")
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        candidates.append(
            cache
            / "llamabatch"
            / "src"
            / f"llama_cpp_python-{v}"
            / "vendor"
            / "llama.cpp"
            / "gguf-py"
        )
    except Exception:
        pass
    for c in candidates:
        if (c / "gguf" / "__init__.py").is_file():
            return c
    if importlib.util.find_spec("gguf") is not None:
        return Path()
    return None


GGUF_PY = gguf_py()


@pytest.mark.skipif(
    GGUF_PY is None,
    reason="llama.cpp's gguf package not found (set LLAMA_CPP_SRC or run scripts/make-tiny-models)",
)
def test_random_model_loads_tokenizes_and_never_stops_early(tmp_path, monkeypatch):
    llama_cpp = pytest.importorskip("llama_cpp")
    if GGUF_PY != Path():
        monkeypatch.syspath_prepend(str(GGUF_PY))
    writer = load_script("random_gguf", GPU / "random_gguf.py")
    shape = writer.PRESETS["tiny"]
    path = tmp_path / "tiny.gguf"
    info = writer.write_random_llama(path, shape, seed=3)
    assert info["bytes"] == path.stat().st_size > 0
    assert info["n_params"] == shape.n_params
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=1, verbose=False)
    try:
        assert llm.n_vocab() == shape.n_vocab
        assert llm.metadata["general.architecture"] == "llama"
        assert int(llm.metadata["llama.block_count"]) == shape.n_layer
        assert llm.token_eos() == writer.EOS
        # byte-level tokenizer: BOS, then about one token per character (the leading ▁ too)
        text = "Tag this ticket: <b>ünïcode</b>"
        tokens = llm.tokenize(text.encode())
        assert tokens[0] == writer.BOS
        assert len(tokens) >= len(text)
        assert all(0 <= t < shape.n_vocab for t in tokens)
        # the EOG row of the tied output is zero: greedy replies run to max_tokens
        out = llm.create_completion(text, max_tokens=24, temperature=0.0)
        assert out["usage"]["completion_tokens"] == 24
        assert out["choices"][0]["finish_reason"] == "length"
    finally:
        llm.close()


def test_shape_rejects_bad_dimensions():
    writer = load_script("random_gguf_shape", GPU / "random_gguf.py")
    with pytest.raises(ValueError, match="n_head must divide n_embd"):
        writer.Shape(512, 65, 2, 4, 2, 128)
    with pytest.raises(ValueError, match="n_vocab=100"):
        writer.Shape(100, 64, 2, 4, 2, 128)
    # Llama 3.2 1B's shape: 1.24 B parameters (tied embeddings)
    assert 1.2e9 < writer.PRESETS["1b"].n_params < 1.3e9


def fake_bin(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A folder of stand-in executables (each prints a version line) and python3."""
    d = tmp_path / "bin"
    d.mkdir()
    for name, line in tools.items():
        p = d / name
        p.write_text(f"#!/bin/sh\necho '{line}'\n")
        p.chmod(0o755)
    (d / "python3").symlink_to(sys.executable)
    return d


def run_script(tmp_path: Path, bindir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CXX", "CC", "OUT")}
    env["PATH"] = str(bindir)
    return subprocess.run(
        [sys.executable, str(GPU / "run"), "--work", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


TOOLS = {"cmake": "cmake version 3.25.1", "c++": "c++ (GCC) 12.2.0", "cc": "cc (GCC) 12.2.0"}


def test_run_refuses_without_nvcc(tmp_path):
    out = tmp_path / "out"
    p = run_script(tmp_path, fake_bin(tmp_path, TOOLS), "--out", str(out))
    assert p.returncode == 2, p.stderr
    assert "missing toolchain: nvcc" in p.stderr
    assert "--cpu" in p.stderr  # says what would do
    doc = json.loads((out / "gpu-bench.json").read_text())
    assert doc["ok"] is False and "nvcc" in doc["refused"]
    assert [s["name"] for s in doc["steps"]] == ["toolchain"]
    assert doc["steps"][0]["ok"] is False
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


SYSTEM_CUBLAS = Path("/usr/include/cublas_v2.h").exists() or any(
    any(Path(d).glob("libcublas.so*"))
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64")
)


@pytest.mark.skipif(SYSTEM_CUBLAS, reason="this machine has cuBLAS in its system folders")
def test_run_refuses_a_cuda_toolkit_without_cublas(tmp_path):
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    bindir = fake_bin(tmp_path, TOOLS)
    nvcc = bindir / "nvcc"  # a wrapper script, as some images have: TOP names the toolkit
    nvcc.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --dryrun) echo "#$ TOP={toolkit}/bin/..";; '
        "*) echo 'Cuda compilation tools, release 13.0, V13.0.88';; esac\n"
    )
    nvcc.chmod(0o755)
    out = tmp_path / "out"
    p = run_script(tmp_path, bindir, "--out", str(out))
    assert p.returncode == 2, p.stderr
    assert "missing CUDA library: cublas_v2.h and libcublas" in p.stderr
    assert str(toolkit) in p.stderr


def test_run_cpu_needs_no_nvcc_but_refuses_without_cmake(tmp_path):
    tools = {k: v for k, v in TOOLS.items() if k != "cmake"}
    p = run_script(tmp_path, fake_bin(tmp_path, tools), "--cpu", "--out", str(tmp_path / "out"))
    assert p.returncode == 2, p.stderr
    assert "missing toolchain: cmake" in p.stderr
    assert "nvcc" not in p.stderr


def test_run_refuses_an_old_cmake(tmp_path):
    tools = {**TOOLS, "cmake": "cmake version 3.16.3"}
    p = run_script(tmp_path, fake_bin(tmp_path, tools), "--cpu", "--out", str(tmp_path / "out"))
    assert p.returncode == 2
    assert "cmake 3.16 is too old" in p.stderr


def test_run_refuses_without_an_output_folder(tmp_path):
    p = run_script(tmp_path, fake_bin(tmp_path, TOOLS), "--cpu")
    assert p.returncode == 2
    assert "no output folder" in p.stderr


def test_targets_read_from_the_results():
    run = load_script("gpu_run", GPU / "run")
    raw = {
        "results": {
            "4": {
                "tg": {"c_median": 400.0, "ours_median": 390.0, "ratio_of_medians": 0.975},
                "pp": {"ratio_of_medians": 0.99},
            }
        },
        "breakdown_s": {"4": {"t_tg": 1.0, "tg_decode": 0.8, "tg_sample": 0.1,
                              "tg_python": 0.06, "tg_add_run": 0.04}},
    }  # fmt: skip
    summary = run.raw_summary(raw, tg=100)
    assert summary["4"]["tg_ratio"] == 0.975
    assert summary["4"]["step_ms"] == pytest.approx(10.0)
    assert summary["4"]["python_ms"] == pytest.approx(1.0)
    doc = {
        "raw_summary": summary,
        "workloads": {
            "S": {"rows": [{"b": 1, "ratio_median": 1.0}, {"b": 4, "ratio_median": 0.72}]}
        },
    }
    t = run.targets(doc)
    assert t["raw_s_tg_b4_vs_batched_bench"]["met"] is True
    assert t["slot_engine_s_b4_vs_one_at_a_time"] == {
        "target": "< 0.70",
        "value": 0.72,
        "met": False,
    }
    assert run.targets({})["raw_s_tg_b4_vs_batched_bench"]["met"] is None


def test_prepare_trims_an_sdist(tmp_path):
    prepare = load_script("gpu_prepare", GPU / "prepare")
    src = tmp_path / "llama_cpp_python-9.9.9"
    files = [
        "CMakeLists.txt",
        "pyproject.toml",
        "llama_cpp/__init__.py",
        "docs/index.md",
        "tests/test_llama.py",
        "vendor/llama.cpp/CMakeLists.txt",
        "vendor/llama.cpp/LICENSE",
        "vendor/llama.cpp/src/llama.cpp",
        "vendor/llama.cpp/models/ggml-vocab-llama.gguf",
        "vendor/llama.cpp/docs/build.md",
        "vendor/llama.cpp/tests/test-backend-ops.cpp",
        "vendor/llama.cpp/ggml/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml.c",
        "vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c",
        "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu",
        "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "vendor/llama.cpp/ggml/src/ggml-metal/ggml-metal.m",
        "vendor/llama.cpp/tools/CMakeLists.txt",
        "vendor/llama.cpp/tools/batched-bench/batched-bench.cpp",
        "vendor/llama.cpp/tools/server/server.cpp",
        "vendor/llama.cpp/gguf-py/gguf/__init__.py",
        "vendor/llama.cpp/gguf-py/tests/test_quants.py",
    ]
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text(f)
    dest = tmp_path / "out"
    left_out = prepare.copy_trimmed(src, dest)
    kept = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert kept == [
        "CMakeLists.txt",
        "llama_cpp/__init__.py",
        "pyproject.toml",
        "vendor/llama.cpp/CMakeLists.txt",
        "vendor/llama.cpp/LICENSE",
        "vendor/llama.cpp/ggml/CMakeLists.txt",
        "vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c",
        "vendor/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu",
        "vendor/llama.cpp/ggml/src/ggml.c",
        "vendor/llama.cpp/gguf-py/gguf/__init__.py",
        "vendor/llama.cpp/src/llama.cpp",
        "vendor/llama.cpp/tools/CMakeLists.txt",
        "vendor/llama.cpp/tools/batched-bench/batched-bench.cpp",
    ]
    tools_cmake = (dest / "vendor/llama.cpp/tools/CMakeLists.txt").read_text()
    assert "add_subdirectory(batched-bench)" in tools_cmake and "server" not in tools_cmake
    assert "vendor/llama.cpp/ggml/src/ggml-vulkan" in left_out
    assert "vendor/llama.cpp/tools/server" in left_out
    assert "vendor/llama.cpp/models" in left_out


@pytest.mark.skipif(SYSTEM_CUBLAS, reason="this machine has cuBLAS in its system folders")
def test_cublas_from_the_nvidia_wheels_is_passed_to_cmake(tmp_path, monkeypatch):
    # PyTorch's images carry cuBLAS as a wheel (nvidia/cu13/{include,lib}), not beside nvcc
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text(f'#!/bin/sh\necho "#$ TOP={toolkit}/bin/.."\n')
    nvcc.chmod(0o755)
    wheel = tmp_path / "site" / "nvidia" / "cu13"
    (wheel / "include").mkdir(parents=True)
    (wheel / "lib").mkdir()
    (wheel / "include" / "cublas_v2.h").write_text("")
    (wheel / "lib" / "libcublas.so.13").write_text("")
    (wheel / "lib" / "libcublasLt.so.13").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    run = load_script("gpu_run_cuda", GPU / "run")
    info = run.find_cuda(str(nvcc), sys.executable)
    assert info["toolkit"] == str(toolkit)
    assert f"-DCUDA_cublas_LIBRARY={wheel / 'lib' / 'libcublas.so.13'}" in info["cmake_args"]
    assert f"-DCUDA_cublasLt_LIBRARY={wheel / 'lib' / 'libcublasLt.so.13'}" in info["cmake_args"]
    assert info["include_flags"] == [f"-I{wheel / 'include'}"]
    assert info["ld_library_path"] == [str(wheel / "lib")]
    if info["driver_library"] is None:  # no libcuda.so to link: no virtual-memory pool
        assert "-DGGML_CUDA_NO_VMM=ON" in info["cmake_args"]
