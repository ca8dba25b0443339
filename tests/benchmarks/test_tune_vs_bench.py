"""benchmarks/tune_vs_bench.py: its verdict rule on made-up figures, and one tiny run end
to end on the real test model whose JSON holds both reports. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import ModuleType

import pytest
from bench_scripts import BENCHMARKS, load_script

ROOT = BENCHMARKS.parent
SCRIPT = BENCHMARKS / "tune_vs_bench.py"


def load() -> ModuleType:
    return load_script("tune_vs_bench", SCRIPT)


def tune_json(base: list[float], slots2: list[float]) -> dict:
    """The parts of a tune report the comparison reads: per-round s/item and ratios."""
    return {
        "baseline": {"setting": "one_at_a_time", "s_per_item": base, "ratio": [1.0] * len(base)},
        "settings": [
            {
                "setting": "slots=2",
                "s_per_item": slots2,
                "ratio": [s / b for s, b in zip(slots2, base)],
            }
        ],
    }


def bench_json(base: list[float], slots2: list[float]) -> dict:
    rows = [
        {"b": 1, "per_item_s": base, "ratio": [1.0] * len(base)},
        {"b": 2, "per_item_s": slots2, "ratio": [s / b for s, b in zip(slots2, base)]},
    ]
    return {"workload": {"rows": rows}}


def test_agree_when_the_difference_is_within_the_larger_spread():
    m = load()
    rows = m.compare(
        [tune_json([1.0, 1.2], [0.8, 1.0])], bench_json([1.1, 1.15], [0.85, 0.95]), (2,)
    )
    assert [r["setting"] for r in rows] == ["one_at_a_time", "slots=2"]
    assert [r["verdict"] for r in rows] == ["agree within noise"] * 2
    base = rows[0]
    assert base["s_per_item"]["diff"] == pytest.approx(0.025)
    assert base["s_per_item"]["noise"] == pytest.approx(0.2)  # tune's 1.0-1.2
    assert "ratio" not in base  # one at a time is 1 by definition
    table = m.format_table(rows)
    assert "one_at_a_time: agree within noise" in table and "ratio" in table


def test_differ_beyond_noise_names_the_figure():
    m = load()
    rows = m.compare(
        [tune_json([1.0, 1.02], [0.5, 0.51])], bench_json([1.0, 1.01], [0.9, 0.92]), (2,)
    )
    assert rows[0]["agree"] is True
    assert rows[1]["agree"] is False
    assert rows[1]["verdict"].startswith("differ beyond noise: s/item 0.405 apart")
    assert "ratio" in rows[1]["verdict"]


def test_one_value_each_cannot_be_judged():
    m = load()
    rows = m.compare([tune_json([1.0], [0.9])], bench_json([1.1], [1.0]), (2,))
    assert all(r["agree"] is None for r in rows)
    assert "give --rounds 2 or more" in rows[0]["verdict"]


@pytest.mark.real_model
def test_tiny_run_end_to_end_writes_both_reports(tmp_path, model_path):
    lines = (ROOT / "examples" / "tag_prompts.jsonl").read_text(encoding="utf-8").splitlines()
    src = tmp_path / "five.jsonl"
    src.write_text("\n".join(lines[:5]) + "\n", encoding="utf-8")
    out_json = tmp_path / "tvb.json"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(src),
            "--slots",
            "2",
            "--rounds",
            "2",
            "--items",
            "2",
            "--max-tokens",
            "4",
            "--n-ctx-seq",
            "512",
            "--threads",
            "1",
            "--model",
            str(model_path),
            "--json",
            str(out_json),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "one_at_a_time: " in done.stdout and "slots=2: " in done.stdout
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert doc["schema"] == "llamabatch.tune_vs_bench/1"
    assert doc["order"] == ["tune", "bench", "tune"]
    assert [t["schema"] for t in doc["tune"]] == ["llamabatch.tune/1"] * 2
    assert doc["bench"]["schema"] == "llamabatch.bench/1"
    # the same items: every tune run and bench drew the same disjoint rounds
    bench_rounds = doc["bench"]["workload"]["prompts"]["item_ids"]
    for t in doc["tune"]:
        assert [r["item_ids"] for r in t["rounds"]] == bench_rounds
    assert [c["setting"] for c in doc["comparison"]] == ["one_at_a_time", "slots=2"]
    for c in doc["comparison"]:
        assert len(c["tune"]["s_per_item"]["values"]) == 4  # 2 rounds x 2 tune runs
        assert len(c["bench"]["s_per_item"]["values"]) == 2
        assert c["verdict"] in done.stdout
        # the verdict follows the rule from the JSON's own figures: each difference of
        # medians within the larger round-to-round spread
        names = ("s_per_item", "ratio") if c["slots"] > 1 else ("s_per_item",)
        within = []
        for name in names:
            t, b = c["tune"][name], c["bench"][name]
            noise = max(t["max"] - t["min"], b["max"] - b["min"])
            assert c[name]["diff"] == pytest.approx(b["median"] - t["median"])
            assert c[name]["noise"] == pytest.approx(noise)
            within.append(None if noise == 0 else abs(b["median"] - t["median"]) <= noise)
        expected = None if None in within else all(within)
        assert c["agree"] is expected
