"""Issue 10, fault 2: a signal while llama.cpp loads the model is not lost.

llama.cpp calls llama-cpp-python's log callback (Python) all through the load; a SIGINT
then raised ``KeyboardInterrupt`` inside the callback, ctypes dropped it ("Exception
ignored on calling ctypes callback function") and the job ran to the end with exit 0.

Real signals, real subprocesses: each run waits until the process has mapped the model
file (llama.cpp memory-maps it when the load starts; read from /proc/PID/maps) and
sends SIGINT or SIGTERM some milliseconds later. Every run must end the documented
way: exit 130, whole lines only, no "Exception ignored", and ``--resume`` completes it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_util import EXAMPLES, popen_cli, read_jsonl, write_jsonl

pytestmark = pytest.mark.real_model

JOB = (
    "--slots",
    "2",
    "--max-tokens",
    "2",
    "--n-ctx-seq",
    "512",
    "--threads",
    "1",
    "--temperature",
    "0",
)


def wait_until_mapped(proc: subprocess.Popen, model_path: Path) -> None:
    """Return once ``proc`` has memory-mapped ``model_path`` (the load has begun)."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 300
    while str(model_path) not in maps.read_text():
        assert proc.poll() is None, "the job ended before it loaded the model"
        assert time.monotonic() < deadline, "the model was never loaded"
        time.sleep(0.002)


@pytest.fixture()
def four_prompts(tmp_path) -> Path:
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()[:4]
    return write_jsonl(tmp_path / "in.jsonl", [json.loads(line) for line in lines])


@pytest.mark.parametrize(
    "signum,delay_s",
    [
        (signal.SIGINT, 0.0),
        (signal.SIGINT, 0.02),
        (signal.SIGINT, 0.1),
        (signal.SIGINT, 0.3),
        (signal.SIGTERM, 0.05),
    ],
)
def test_a_signal_during_the_load_ends_the_job_with_130_and_resume_completes_it(
    tmp_path, model_path, four_prompts, signum, delay_s
):
    out_path = tmp_path / "out.jsonl"
    model_path = Path(model_path).resolve()
    proc = popen_cli("complete", four_prompts, "-o", out_path, "--model", model_path, *JOB)
    wait_until_mapped(proc, model_path)
    time.sleep(delay_s)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    assert "interrupted" in err
    text = out_path.read_text(encoding="utf-8") if out_path.exists() else ""
    assert text == "" or text.endswith("\n")  # whole lines only
    done = read_jsonl(out_path) if text else []

    again = popen_cli(
        "complete", four_prompts, "-o", out_path, "--model", model_path, "--resume", *JOB
    )
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    records = read_jsonl(out_path)
    assert records[: len(done)] == done
    assert sorted(r["id"] for r in records) == ["t01", "t02", "t03", "t04"]
