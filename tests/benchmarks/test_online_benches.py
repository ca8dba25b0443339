"""benchmarks/create_completions.py and benchmarks/online.py run end to end at a tiny size
and write what they promise. No timing is asserted."""

from __future__ import annotations

import json

import pytest
from bench_scripts import BENCHMARKS, load_script

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("script", ["create_completions", "online"])
def test_the_script_reports_both_methods_every_round(script, tmp_path, model_path, capsys):
    m = load_script(f"bench_{script}", BENCHMARKS / f"{script}.py")
    out = tmp_path / "out.json"
    tiny = ["--rounds", "2", "--items", "4", "--max-tokens", "4", "--threads", "1"]
    extra = ["--clients", "2", "--slots", "2"] if script == "online" else ["--slots", "2"]
    assert m.main([*tiny, *extra, "--model", str(model_path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert all(len(v) == 2 and None not in v for v in doc["seconds_per_item"].values())
    assert len(doc["ratio_per_round"]) == 2 and doc["ratio"] > 0
    assert "median s per item" in capsys.readouterr().out
    if script == "online":
        assert doc["decode_calls"] > 0 and doc["generated_tokens"] > 0
