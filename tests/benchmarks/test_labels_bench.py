"""benchmarks/labels.py: its fresh prompts and job tags, and one tiny run end to end on
the real test model whose JSON holds every method and ratio. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import ModuleType

import pytest
from bench_scripts import BENCHMARKS, load_script

ROOT = BENCHMARKS.parent
SCRIPT = BENCHMARKS / "labels.py"


def load() -> ModuleType:
    return load_script("labels_bench", SCRIPT)


def test_each_job_tag_starts_unlike_the_one_before_it_and_none_repeats():
    m = load()
    tags = [m.job_tag(r, k) for r in range(12) for k in range(len(m.METHODS))]
    assert len(set(tags)) == len(tags)
    assert all(a[0] != b[0] for a, b in zip(tags, tags[1:]))


@pytest.mark.parametrize("at, marker", [("item", "?\n\n"), ("front", "<|im_start|>user\n")])
def test_fresh_prompts_put_the_tag_after_the_shared_part(at, marker):
    m = load()
    base = m.tickets()
    prompts = m.fresh_prompts("C7", len(base) + 2, at)
    assert len(set(prompts)) == len(prompts)
    for i, p in enumerate(prompts):
        ticket = base[i % len(base)]
        cut = ticket.index(marker) + len(marker)
        assert p == ticket[:cut] + f"Ticket C7-{i}. " + ticket[cut:]


def test_label_tokens_are_the_prompt_and_the_form_but_its_last_token():
    m = load()

    class Words:  # one token per character, BOS = 0
        def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
            return [0] * add_bos + list(text)

    assert m.with_label_tokens(Words(), "ab", " cd") == [0, *b"ab c"]


@pytest.mark.real_model
def test_tiny_run_end_to_end_reports_every_method_and_ratio(tmp_path, model_path):
    m = load()
    out_json = tmp_path / "labels.json"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "2", "--items", "2", "--threads", "1"]
        + ["--model", str(model_path), "--json", str(out_json)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert list(doc["seconds_per_item"]) == list(m.METHODS)
    assert all(len(v) == 2 and min(v) > 0 for v in doc["seconds_per_item"].values())
    names = [f"{a} / {b}" for a, b in m.RATIOS]
    assert list(doc["ratios"]) == names == list(doc["ratios_per_round"])
    for name, (a, b) in zip(names, m.RATIOS):
        per_round = [x / y for x, y in zip(doc["seconds_per_item"][a], doc["seconds_per_item"][b])]
        assert doc["ratios_per_round"][name] == pytest.approx(per_round)
        assert doc["ratios"][name] == pytest.approx(doc["median"][a] / doc["median"][b])
        assert f"{name} {doc['ratios'][name]:.2f} (rounds " in done.stdout
    stats = done.stdout.split("stats: ", 1)[1]
    # scored and longest label scored 2 items per round each
    assert "labels_scored=8," in stats
