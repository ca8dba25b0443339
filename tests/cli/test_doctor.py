"""``llamabatch doctor``: every check passes on the real model; a build whose decode dies
by a signal is named, and on a CPU that advertises AMX the rebuild command is printed.

The crashing build is a stand-in (``tests/cli/crashing_binding``: a ``llama_cpp`` whose
first decode kills its process with SIGSEGV after logging the AMX repack lines), and the
CPU is a stand-in ``/proc/cpuinfo`` given through ``LLAMABATCH_CPUINFO``, so the AMX
path runs on any machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import ROOT, run_cli, single_error_line

from llamabatch.cli import doctor_diagnosis as dx
from llamabatch.errors import LibraryError

STAND_IN = Path(__file__).parent / "crashing_binding"
CORRUPTING = Path(__file__).parent / "corrupting_binding"

AMX_CPUINFO = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum\n"
    "flags\t\t: fpu sse sse2 ssse3 avx avx2 fma f16c avx512f avx512bw avx512_vnni "
    "avx512_bf16 amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\n"
)
PLAIN_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 avx avx2 fma f16c\n"


def doctor(*argv: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llamabatch", "doctor", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
    )


def stand_in_env(tmp_path: Path, cpuinfo: str) -> dict[str, str]:
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    path = os.pathsep.join([str(STAND_IN), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, LLAMABATCH_CPUINFO=str(tmp_path / "cpuinfo"))


def lines_of(out: str, status: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(status + "  ")]


# -- the real model ------------------------------------------------------------------
@pytest.mark.real_model
def test_every_check_passes_on_the_default_model(model_path):
    done = doctor("--model", model_path, "--slots", 2, "--n-ctx-seq", 512, "--threads", 1)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = lines_of(done.stdout, "PASS")
    names = [
        "system info",
        "model load",
        "decode alone",
        "batch of 2 slots",
        "KV bytes per slot",
        "batched = alone",
    ]
    assert [line[6:].split("  ")[0].strip() for line in passed] == names
    assert lines_of(done.stdout, "FAIL") == []
    assert "llama-cpp-python  0.3" in done.stdout and "(supported:" in done.stdout
    assert "64 prompt tokens decoded" in done.stdout
    kv = passed[-2]
    assert "estimate 11.25 MiB per slot, allocated 11.25 MiB per slot (2 x 512 cells)" in kv
    assert "logits on the CPU agree" in passed[-1] and "2 sequences" in passed[-1]
    assert "6 of 6 checks passed" in done.stdout


@pytest.mark.real_model
@pytest.mark.parametrize(
    ("mode", "step", "report", "remedy"),
    [
        ("mixed", "mixed step", "#28537", "flash attention on or off"),
        ("long", "long prefill", "#28211", "another backend (Vulkan instead of HIP)"),
        ("refill", "refill", "#28056", "fewer slots"),
    ],
)
def test_a_device_that_corrupts_a_defect_shape_fails_the_agreement_check(
    model_path, mode, step, report, remedy
):
    """The corrupting stand-in (``tests/cli/corrupting_binding``: the real binding whose
    logits are wrong in one shape of decode: a prompt beside other sequences' steps as
    llama.cpp #28537 on HIP, a prompt past n_ubatch beside them as #28211, a refill into a
    sequence just removed as #28056) fails ``batched = alone`` only, naming that step, the
    report and what to try."""
    path = os.pathsep.join([str(CORRUPTING), str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = doctor(
        "--model", model_path, "--slots", 3, "--n-ctx-seq", 256, "--threads", 1,
        env=dict(os.environ, PYTHONPATH=path, LLAMABATCH_CORRUPT=mode),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    failed = lines_of(done.stdout, "FAIL")
    assert len(failed) == 1 and "batched = alone" in failed[0], done.stdout
    assert "logits on the CPU disagree" in failed[0] and "3 sequences" in failed[0]
    assert f"first failed step: {step} (seq " in failed[0]
    assert f"failed step: {step} (" in done.stdout and report in done.stdout
    assert "device CPU: batched replies on this device would differ" in done.stdout
    assert f"try: {remedy}" in done.stdout and "--slots 1" in done.stdout
    assert "5 of 6 checks passed" in done.stdout


@pytest.mark.real_model
def test_versions_are_reported_when_the_binding_is_out_of_range(model_path, tmp_path):
    info = tmp_path / "llama_cpp_python-0.3.16.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.16\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("LLAMABATCH_ALLOW_UNTESTED_LLAMA_CPP", None)
    done = doctor("--model", model_path, "--slots", 2, "--n-ctx-seq", 256, "--threads", 1, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "llama-cpp-python  0.3.16 (NOT supported: llamabatch supports >=0.3.26" in done.stdout
    failed = lines_of(done.stdout, "FAIL")
    assert any("batch of 2 slots" in f and "0.3.16 is not supported" in f for f in failed), failed
    assert any("model load" in p for p in lines_of(done.stdout, "PASS"))


# -- a build that dies by a signal ---------------------------------------------------
@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    """A file that passes the GGUF magic check (the stand-in loads nothing)."""
    path = tmp_path / "stand-in.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 60)
    return path


def test_the_amx_crash_names_the_signal_the_cause_and_the_fix(tmp_path, gguf):
    env = stand_in_env(tmp_path, AMX_CPUINFO)
    env["CMAKE_ARGS"] = "-DGGML_VULKAN=on"
    done = doctor("--model", gguf, "--slots", 2, "--n-ctx-seq", 256, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "AMX advertised: yes" in out and "amx_tile" in out
    assert any("model load" in p for p in lines_of(out, "PASS"))
    decode = [f for f in lines_of(out, "FAIL") if "decode alone" in f]
    assert decode and "died by signal SIGSEGV" in decode[0]
    assert "known cause: this CPU advertises Intel AMX" in out
    fix = [line.strip() for line in out.splitlines() if "-mno-amx-tile" in line]
    assert fix, out
    assert fix[0].startswith("CMAKE_ARGS=-DGGML_VULKAN=on CFLAGS='-mno-amx-tile -mno-amx-int8")
    assert "--no-binary llama-cpp-python llama-cpp-python==0.3.36" in fix[0]
    assert "checks passed" in out.splitlines()[-1]


def test_a_crash_without_amx_names_the_signal_and_shows_the_log(tmp_path, gguf):
    done = doctor(
        "--model", gguf, "--slots", 2, "--n-ctx-seq", 256, env=stand_in_env(tmp_path, PLAIN_CPUINFO)
    )
    assert done.returncode == 1
    out = done.stdout
    assert "AMX advertised: no" in out
    assert any("died by signal SIGSEGV" in f for f in lines_of(out, "FAIL"))
    assert "known cause" not in out and "-mno-amx" not in out
    assert "last lines of its output:" in out and "amx repack tensor" in out


def test_a_crash_during_the_load_is_reported_and_the_doctor_goes_on(tmp_path, gguf):
    env = stand_in_env(tmp_path, AMX_CPUINFO)
    env["LLAMABATCH_STAND_IN_CRASH_AT"] = "load"
    done = doctor("--model", gguf, "--slots", 2, "--n-ctx-seq", 256, env=env)
    assert done.returncode == 1
    failed = lines_of(done.stdout, "FAIL")
    assert sum("died by signal SIGSEGV" in f for f in failed) == 4  # load, decode, batch, agree
    assert "KV bytes per slot" in failed[-2] and "batched = alone" in failed[-1]
    assert done.stdout.rstrip().endswith("checks passed")


# -- usage, and the hints elsewhere --------------------------------------------------
@pytest.mark.parametrize(
    "args,named",
    [
        (("--slots", "1"), "--slots 1"),
        (("--n-ctx-seq", "64"), "--n-ctx-seq 64"),
        (("--timeout", "0"), "--timeout 0"),
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, args, named):
    code, out, err = run_cli(capsys, "doctor", *args)
    assert code == 2 and out == ""
    assert named in single_error_line(err)


def test_a_missing_model_is_a_failed_check(tmp_path):
    done = doctor("--model", tmp_path / "none.gguf", env=stand_in_env(tmp_path, PLAIN_CPUINFO))
    assert done.returncode == 1
    assert any(
        "model file" in f and "model file not found" in f for f in lines_of(done.stdout, "FAIL")
    )


def test_library_errors_and_cli_model_errors_point_to_the_doctor(capsys, tmp_path):
    assert "llamabatch doctor" in str(LibraryError("libllama.so: cannot open"))
    prompts = tmp_path / "in.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    code, _, err = run_cli(capsys, "complete", prompts, "--model", tmp_path / "m.gguf")
    assert code == 2
    line = single_error_line(err)
    assert "model file not found" in line and "llamabatch doctor --model GGUF" in line


# -- the diagnosis alone -------------------------------------------------------------
def test_cpu_flags_read_the_first_processor(tmp_path):
    (tmp_path / "c").write_text(AMX_CPUINFO)
    flags = dx.cpu_flags(tmp_path / "c")
    assert dx.has_amx(flags) and "avx2" in flags
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert dx.cpu_flags(tmp_path / "arm") == {"fp", "asimd", "sve"}
    assert dx.cpu_flags(tmp_path / "missing") == frozenset()


def test_death_names_signals_and_exit_statuses():
    assert dx.death(-11).text == "died by signal SIGSEGV (Segmentation fault)"
    assert dx.death(-4).signal.name == "SIGILL"
    assert dx.death(3).text == "exit status 3"


def test_amx_on_vm_needs_a_fault_an_amx_cpu_and_the_repack_log():
    flags = frozenset({"amx_tile", "avx2"})
    log = "ggml_backend_amx_buffer_set_tensor: amx repack tensor blk.0.ffn_up.weight"
    assert dx.amx_on_vm(dx.death(-11), log, flags)
    assert dx.amx_on_vm(dx.death(-11), "load_tensors: AMX model buffer size = 20 MiB", flags)
    assert not dx.amx_on_vm(dx.death(-11), log, frozenset({"avx2"}))
    assert not dx.amx_on_vm(dx.death(-11), "load_tensors: CPU model buffer size", flags)
    assert not dx.amx_on_vm(dx.death(-9), log, flags)  # killed (OOM), not a fault
    assert not dx.amx_on_vm(dx.death(1), log, flags)


def test_the_rebuild_command_keeps_the_users_cmake_args():
    cmd = dx.rebuild_command("/v/bin/python", "0.3.36", "-DGGML_CUDA=on -DX=1")
    assert cmd.startswith("CMAKE_ARGS='-DGGML_CUDA=on -DX=1' CFLAGS='-mno-amx-tile")
    assert "CXXFLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'" in cmd
    assert cmd.endswith("--no-binary llama-cpp-python llama-cpp-python==0.3.36")
    assert "CMAKE_ARGS" not in dx.rebuild_command("python", None, None)


def test_allocated_kv_reads_the_last_kv_line():
    log = (
        "llama_kv_cache: size =   16.00 MiB (  512 cells,  30 layers,  1/1 seqs), K (f16)\n"
        "llama_kv_cache: size =   22.50 MiB (  512 cells,  30 layers,  2/2 seqs), K (f16)\n"
    )
    assert dx.allocated_kv(log) == dx.LoggedKv(round(22.5 * 2**20), 512, 2)
    assert dx.allocated_kv("nothing logged") is None
