"""``llamabatch eval``: a local task on the real model prints the harness's table and
writes its results; bad input is one line; without the eval extra it says how to install
it; importing llamabatch never imports lm_eval."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import run_cli, single_error_line

TASKS = Path(__file__).resolve().parents[1] / "lm_eval" / "tasks"


@pytest.mark.real_model
def test_a_local_task_runs_and_writes_its_results(capsys, model_path, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(TASKS)  # the task's data_files are relative to it
    out_file = tmp_path / "results.json"
    code, out, err = run_cli(
        capsys, "eval", "--model", model_path, "--tasks", "llamabatch_capitals",
        "--include-path", TASKS, "--n-ctx", 512, "--threads", 1, "--slots", 2,
        "--limit", 4, "--quiet", "--output", out_file,
    )  # fmt: skip
    assert code == 0, err
    assert "llamabatch_capitals" in out and "acc" in out
    results = json.loads(out_file.read_text())["results"]["llamabatch_capitals"]
    assert 0.0 <= results["acc,none"] <= 1.0
    assert results["sample_len"] == 4


def test_an_unknown_task_is_one_line(capsys) -> None:
    pytest.importorskip("lm_eval")
    code, _, err = run_cli(capsys, "eval", "--tasks", "no_such_task", "--include-path", TASKS)
    assert code == 2
    assert "no task named no_such_task" in single_error_line(err)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_without_the_extra_it_says_how_to_install_it() -> None:
    proc = _python(
        "import sys; sys.modules['lm_eval'] = None\n"  # as if lm-eval were not installed
        "from llamabatch.cli.main import main\n"
        "sys.exit(main(['eval', '--tasks', 'x']))\n"
    )
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'llamabatch[eval]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_importing_llamabatch_never_imports_lm_eval() -> None:
    proc = _python(
        "import sys, llamabatch, llamabatch.cli.main, llamabatch.cli.eval\n"
        "print('lm_eval' in sys.modules)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
