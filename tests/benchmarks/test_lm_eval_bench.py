"""benchmarks/lm_eval_loglikelihood.py: its requests, and one tiny run end to end on the
real test model whose JSON holds both methods, the ratio and their agreement. No timing
is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bench_scripts import BENCHMARKS, load_script

SCRIPT = BENCHMARKS / "lm_eval_loglikelihood.py"


def test_requests_share_the_shots_and_a_question_per_four_choices():
    m = load_script("lm_eval_bench", SCRIPT)
    pairs = m.requests("r3", 2, 1)
    assert len(pairs) == 8
    contexts = [c for c, _ in pairs]
    assert len(set(contexts)) == 2
    assert all(c.startswith("Question shot-0: What is the capital of France?\nAnswer: Paris\n\n")
               for c in contexts)  # fmt: skip
    assert contexts[0].endswith("Question r3-0: What is the capital of France?\nAnswer:")
    assert [x for _, x in pairs[:4]] == [" Paris", " Berlin", " Rome", " Madrid"]


@pytest.mark.real_model
def test_a_tiny_run_end_to_end(model_path, tmp_path):
    pytest.importorskip("lm_eval")
    out = tmp_path / "r.json"
    argv = ["--rounds", "2", "--questions", "2", "--shots", "1", "--slots", "2"]
    argv += ["--threads", "1", "--model", str(model_path), "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert set(report["seconds_per_request"]) == {"llamabatch", "logits_all"}
    assert all(len(v) == 2 for v in report["seconds_per_request"].values())
    assert report["ratio"] > 0 and len(report["ratio_per_round"]) == 2
    assert report["worst"] < 0.05  # the agreement bound
    assert "logits_all / llamabatch" in proc.stdout
