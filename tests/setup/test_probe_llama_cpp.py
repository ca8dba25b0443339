"""``scripts/probe-llama-cpp`` (run by ``scripts/setup-venv``): probe the installed
llama-cpp-python with ``llamabatch doctor`` and rebuild it with AMX off only when a check
died by a signal on a CPU that advertises AMX.

No real rebuild happens here. The venv's python is a stand-in script: ``-m pip`` is
recorded (a ``pip wheel`` leaves an empty wheel file), ``-m llamabatch`` runs the real
``llamabatch doctor``, against the crashing binding of ``tests/cli/crashing_binding``
(its first decode dies by SIGSEGV after logging llama.cpp's AMX repack lines) until a
``pip install`` has "installed" the rebuilt wheel, and against the real llama-cpp-python
after it. The CPU is a stand-in cpuinfo file (``LLAMABATCH_CPUINFO``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "probe-llama-cpp"
STAND_IN = ROOT / "tests" / "cli" / "crashing_binding"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

FAKE_PYTHON = """#!/usr/bin/env bash
state="$FAKE_STATE"
if [ "$1" = -m ] && [ "$2" = pip ]; then
    shift 2
    flags="CFLAGS=${CFLAGS-} | CXXFLAGS=${CXXFLAGS-}"
    echo "pip $* | $flags | CMAKE_ARGS=${CMAKE_ARGS-<unset>}" >>"$state/pip.log"
    if [ "$1" = wheel ]; then
        while [ $# -gt 0 ]; do
            if [ "$1" = -w ]; then
                touch "$2/llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"
            fi
            shift
        done
    elif [ "$1" = install ]; then
        touch "$state/installed"
    fi
    exit 0
fi
if [ "$1" = -m ] && [ "$2" = llamabatch ]; then
    if [ -f "$state/installed" ] && [ -z "${FAKE_STILL_CRASHES:-}" ]; then
        PYTHONPATH="$FAKE_ROOT" exec "$FAKE_REAL" "$@"
    fi
    PYTHONPATH="$FAKE_STAND_IN:$FAKE_ROOT" exec "$FAKE_REAL" "$@"
fi
exec "$FAKE_REAL" "$@"
"""

AMX_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8\n"
PLAIN_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma f16c\n"


class Probe:
    """Runs the script with the stand-in python in ``tmp``; ``pip_calls`` are recorded."""

    def __init__(self, tmp: Path, model: Path) -> None:
        self.tmp, self.model = tmp, model
        self.state = tmp / "state"
        self.state.mkdir()
        self.python = tmp / "python"
        self.python.write_text(FAKE_PYTHON)
        self.python.chmod(0o755)
        self.wheels = tmp / "wheels"

    def run(self, cpuinfo: str, **env: str) -> subprocess.CompletedProcess:
        (self.tmp / "cpuinfo").write_text(cpuinfo)
        full = dict(
            os.environ,
            FAKE_STATE=str(self.state),
            FAKE_REAL=sys.executable,
            FAKE_ROOT=str(ROOT),
            FAKE_STAND_IN=str(STAND_IN),
            LLAMABATCH_CPUINFO=str(self.tmp / "cpuinfo"),
            LLAMABATCH_WHEEL_DIR=str(self.wheels),
            LLAMABATCH_TEST_GGUF=str(self.model),
        )
        for name in ("CMAKE_ARGS", "CFLAGS", "CXXFLAGS", "FAKE_STILL_CRASHES"):
            full.pop(name, None)
        full.update(env)
        return subprocess.run(
            ["bash", str(SCRIPT), str(self.python)],
            capture_output=True,
            text=True,
            timeout=900,
            env=full,
        )

    @property
    def pip_calls(self) -> list[str]:
        log = self.state / "pip.log"
        return log.read_text().splitlines() if log.exists() else []

    def no_amx_dir(self, cmake_args: str = "") -> Path:
        return self.wheels / "no-amx" / hashlib.sha256(cmake_args.encode()).hexdigest()[:16]


@pytest.fixture
def probe(tmp_path: Path, model_path: Path) -> Probe:
    return Probe(tmp_path, model_path)


@pytest.fixture
def stand_in_probe(tmp_path: Path) -> Probe:
    """For cases that never reach the real binding: any file with the GGUF magic."""
    model = tmp_path / "stand-in.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    return Probe(tmp_path, model)


@pytest.mark.real_model
def test_a_working_build_is_probed_and_nothing_is_rebuilt(probe):
    (probe.state / "installed").touch()  # the real binding from the start
    done = probe.run(AMX_CPUINFO)
    assert done.returncode == 0, done.stderr
    assert "llama-cpp-python works here" in done.stderr
    assert probe.pip_calls == []


def test_a_crash_without_amx_rebuilds_nothing_and_shows_the_probe(stand_in_probe):
    done = stand_in_probe.run(PLAIN_CPUINFO)
    assert done.returncode == 1
    assert "this CPU does not advertise AMX" in done.stderr
    assert "died by signal SIGSEGV" in done.stderr  # the doctor's own output
    assert stand_in_probe.pip_calls == []


@pytest.mark.real_model
def test_a_crash_on_an_amx_cpu_rebuilds_without_amx_keeping_cmake_args(probe):
    done = probe.run(AMX_CPUINFO, CMAKE_ARGS="-DGGML_VULKAN=on", CFLAGS="-O2")
    assert done.returncode == 0, done.stderr
    reason = [line for line in done.stderr.splitlines() if "advertises AMX" in line]
    assert len(reason) == 1 and "died by a signal" in reason[0]
    target = probe.no_amx_dir("-DGGML_VULKAN=on")
    wheel, install = probe.pip_calls
    assert wheel.startswith("pip wheel ") and "--no-binary llama-cpp-python" in wheel
    assert f"-w {target} llama-cpp-python==" in wheel
    assert f"CFLAGS=-O2 {NO_AMX} | CXXFLAGS={NO_AMX} | CMAKE_ARGS=-DGGML_VULKAN=on" in wheel
    assert install.startswith("pip install ") and "--force-reinstall" in install
    assert f"--no-index --find-links {target} " in install
    assert "built with AMX off works here" in done.stderr


@pytest.mark.real_model
def test_a_cached_no_amx_wheel_is_installed_without_a_build(probe):
    cached = probe.no_amx_dir()
    cached.mkdir(parents=True)
    (cached / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").touch()
    done = probe.run(AMX_CPUINFO)
    assert done.returncode == 0, done.stderr
    assert [c.split()[1] for c in probe.pip_calls] == ["install"]
    assert "CMAKE_ARGS=<unset>" in probe.pip_calls[0]
    # a build of another CMAKE_ARGS would have its own directory
    assert probe.no_amx_dir("-DGGML_CUDA=on") != cached


def test_a_rebuild_that_does_not_help_stops_with_the_probe_output(stand_in_probe):
    done = stand_in_probe.run(AMX_CPUINFO, FAKE_STILL_CRASHES="1")
    assert done.returncode == 1
    assert "still fails after the rebuild with AMX off" in done.stderr
    assert "died by signal SIGSEGV" in done.stderr and "known cause" in done.stderr
    assert [c.split()[1] for c in stand_in_probe.pip_calls] == ["wheel", "install"]


def test_a_failure_that_is_not_a_signal_rebuilds_nothing(stand_in_probe, tmp_path):
    done = stand_in_probe.run(AMX_CPUINFO, LLAMABATCH_TEST_GGUF=str(tmp_path / "missing.gguf"))
    assert done.returncode == 1
    assert "llama-cpp-python does not work here" in done.stderr
    assert "model file not found" in done.stderr
    assert stand_in_probe.pip_calls == []
