"""benchmarks/batched_calls.py runs end to end at a tiny size, both comparisons, and writes
what it promises. No timing is asserted."""

from __future__ import annotations

import json

import pytest
from bench_scripts import BENCHMARKS, load_script

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("compare", ["create", "online"])
def test_both_methods_are_reported_every_round(compare, tmp_path, model_path, capsys):
    m = load_script("bench_batched_calls", BENCHMARKS / "batched_calls.py")
    out = tmp_path / "out.json"
    tiny = ["--rounds", "2", "--items", "4", "--max-tokens", "4", "--threads", "1"]
    tiny += ["--clients", "2", "--slots", "2", "--compare", compare]
    assert m.main([*tiny, "--model", str(model_path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["seconds_per_item"]) == 2
    assert all(len(v) == 2 and None not in v for v in doc["seconds_per_item"].values())
    assert len(doc["ratio_per_round"]) == 2 and doc["ratio"] > 0
    assert doc["decode_calls"] > 0 and doc["generated_tokens"] > 0
    assert "median s per item" in capsys.readouterr().out
