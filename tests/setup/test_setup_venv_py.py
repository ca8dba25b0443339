"""``scripts/setup_venv.py``, the set-up that runs on Windows too: it makes the venv with
the venv module and runs every later step with the python the module put there (not a
hard-coded ``.venv/bin/python``), and picks llama-cpp-python's source as the docs say.
``--dry-run`` makes the venv and prints the commands (no install, no build)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "setup_venv.py"


def dry_run(tmp_path: Path, *args: str, cmake_args: str | None = None) -> list[list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}
    if cmake_args is not None:
        env["CMAKE_ARGS"] = cmake_args
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--venv", str(tmp_path / "v"), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split(": ", 1)[1] for line in done.stderr.splitlines()]
    assert lines[-1] == "ready: " + lines[0].split()[0]
    return [shlex.split(line) for line in lines[:-1]]


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> list[list[str]]:
    return dry_run(tmp_path_factory.mktemp("plain"), "test,docs")


def test_every_step_runs_the_python_the_venv_module_made(plain) -> None:
    python = Path(plain[0][0])
    assert all(command[0] == str(python) for command in plain)
    assert python.parent.parent.name == "v"  # .venv\Scripts\python.exe on Windows
    done = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], capture_output=True)
    assert Path(done.stdout.decode().strip()).name == "v"


def test_it_installs_llama_cpp_python_then_llamabatch_then_runs_the_doctor(plain) -> None:
    pip = [c[3:] for c in plain[:3]]
    assert pip[0] == ["install", "--quiet", "--upgrade", "pip"]
    assert pip[1] == ["install", "--quiet", "llama-cpp-python==0.3.36"]
    assert pip[2] == ["install", "--quiet", "-e", f"{ROOT}[test,docs]"]
    assert plain[3][1:] == ["-m", "llamabatch", "doctor", "--slots", "2", "--n-ctx-seq", "512"]


def test_a_wheel_index_or_cmake_args_choose_the_build(tmp_path) -> None:
    wheel = dry_run(tmp_path / "a", "--wheel-index", "vulkan")[1]
    assert wheel[-5:] == [
        "--only-binary",
        "llama-cpp-python",
        "--extra-index-url",
        "https://abetlen.github.io/llama-cpp-python/whl/vulkan",
        "llama-cpp-python==0.3.36",
    ]
    source = dry_run(tmp_path / "b", cmake_args="-DGGML_VULKAN=on")[1]
    assert {"--no-binary", "--force-reinstall", "--no-cache-dir"} <= set(source)
