"""Scripts of benchmarks/ run end to end at a tiny size and write what they promise: their
rounds go through llamabatch.measure's runner. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bench_scripts import BENCHMARKS, load_script, stand_in

#: A stand-in for llama.cpp's llama-batched-bench: its table for the sizes asked for.
BATCHED_BENCH = """#!{python}
import sys
a = sys.argv
pp, tg = int(a[a.index("-npp") + 1]), int(a[a.index("-ntg") + 1])
cols = ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"]
print("| " + " | ".join(cols) + " |")
print("|" + "|".join("---" for _ in cols) + "|")
for b in map(int, a[a.index("-npl") + 1].split(",")):
    t_pp, t_tg = 0.004 * b * pp, 0.01 * b * tg
    row = (pp, tg, b, b * (pp + tg), t_pp, b * pp / t_pp, t_tg, b * tg / t_tg, t_pp + t_tg, 1.0)
    print("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |" % row)
"""


def run(script: str, *args: object, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_bench_scheduler_on_the_fake(tmp_path):
    m = load_script("bench_scheduler", BENCHMARKS / "bench_scheduler.py")
    out = tmp_path / "s.json"
    assert m.main(["--items", "12", "--slots", "1", "3", "--repeat", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["slots"] for r in rows] == [1, 3]
    assert all(r["seq_steps"] == 12 * 36 and r["total_s"] >= r["scheduler_s"] for r in rows)


@pytest.mark.real_model
def test_vs_batched_bench_pairs_every_b_in_every_round(tmp_path, model_path):
    tool = stand_in(tmp_path, "llama-batched-bench", BATCHED_BENCH)
    out = tmp_path / "vs.json"
    text = run(
        "vs_batched_bench.py",
        *("--model", model_path, "--slots", "1,2", "--prompt-tokens", "16"),
        *("--gen-tokens", "4", "--rounds", "2", "--threads", "1", "--json", out),
        env={"LLAMA_BATCHED_BENCH": str(tool)},
    )
    doc = json.loads(out.read_text())
    assert sorted(doc["pairs"]) == ["1", "2"]
    for b, pairs in doc["pairs"].items():
        assert len(pairs) == 2 and all(p["c"]["B"] == p["ours"]["B"] == int(b) for p in pairs)
        tg = doc["results"][b]["tg"]
        assert tg["c_median"] == pytest.approx(100.0, abs=1.0)  # the stand-in's figure
        assert len(tg["paired"]) == 2 and tg["ours_median"] > 0
    assert "ours / llama-batched-bench, 2 rounds" in text


@pytest.mark.real_model
def test_prefix_copy_and_grammar_cost_report_their_medians(tmp_path, model_path):
    out = tmp_path / "p.json"
    run(
        "prefix_copy.py",
        *("--model", model_path, "--prefix", "40", "--slots", "2", "--n-ctx-seq", "256"),
        *("--repeats", "2", "--threads", "1", "--json", out),
    )
    doc = json.loads(out.read_text())
    assert len(doc["all"]["prefill"]) == 2 and len(doc["all"]["copy"]) == 2
    assert (
        doc["copy_seq_ms"]
        == sorted(doc["all"]["copy"])[0]
        + (sorted(doc["all"]["copy"])[1] - sorted(doc["all"]["copy"])[0]) / 2
    )
    text = run(
        "grammar_cost.py",
        *("--model", model_path, "--rounds", "2", "--steps", "1", "--threads", "1"),
    )
    figures = json.loads(text)
    assert set(figures["ms_per_step"]) == {"none", "lazy", "full"} and figures["rounds"] == 2
