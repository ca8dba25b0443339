"""``llamabatch tune``: its options (those of ``complete``), bad usage, the plot extra,
and a short real-model run whose JSON is recounted. No timing is asserted."""

from __future__ import annotations

import json
import sys

import pytest
from cli_util import EXAMPLES, FAST, MULTI_REPLY_LINES, run_cli, single_error_line, write_jsonl

from llamabatch.cli.common import ArgumentParser
from llamabatch.cli.complete import add_item_options
from llamabatch.cli.main import build_parser
from llamabatch.cli.tune import complete_args


def _flags(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_tune_has_the_item_options_of_complete(capsys):
    items = ArgumentParser(add_help=False)
    add_item_options(items)
    code, out, _ = run_cli(capsys, "tune", "--help")
    assert code == 0
    for flag in _flags(items) | {
        "--model",
        "--slots",
        "--rounds",
        "--budget",
        "--items",
        "--json",
        "--plot",
    }:
        assert flag in out, flag
    assert "pip install 'llamabatch[plot]'" in out


@pytest.mark.parametrize(
    "args, named",
    [
        (["--slots", "1,2"], "slot counts must be integers >= 2"),
        (["--slots", "two"], "not a comma-separated list"),
        (["--rounds", "3", "--items", "8"], "--rounds 3 x --items 8 needs 24 distinct prompts"),
        (["--temperature", "-1"], "--temperature -1.0 is out of range"),
        (["--choices", "a,,b"], "has an empty choice"),
        (["--budget", "0"], "--budget 0 is out of range: valid is seconds > 0"),
    ],
)
def test_bad_usage_exits_2_before_any_model_work(capsys, args, named, tmp_path):
    code, _, err = run_cli(capsys, "tune", EXAMPLES, "--model", tmp_path / "missing.gguf", *args)
    assert code == 2
    assert named in single_error_line(err)


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_an_output_file_that_cannot_be_written_is_refused_before_any_model_work(
    capsys, tmp_path, flag
):
    if flag == "--plot":
        pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    target = tmp_path / "missing" / "x.out"
    code, _, err = run_cli(
        capsys, "tune", EXAMPLES, "--model", tmp_path / "none.gguf", flag, target
    )
    assert code == 2
    line = single_error_line(err)
    assert f"{flag} {target}: cannot write it: the folder {target.parent} does not exist" in line
    code, _, err = run_cli(
        capsys, "tune", EXAMPLES, "--model", tmp_path / "none.gguf", flag, tmp_path
    )
    assert code == 2 and "it is a folder" in single_error_line(err)


@pytest.mark.parametrize("flag", [["--n", "3"], ["--score-choices"]])
def test_a_flag_asking_for_more_than_one_reply_is_refused(capsys, tmp_path, flag):
    code, _, err = run_cli(capsys, "tune", EXAMPLES, "--model", tmp_path / "missing.gguf", *flag)
    assert code == 2
    line = single_error_line(err)
    assert f"{flag[0]}: tune compares one generated reply per item" in line
    assert f"drop {flag[0]}" in line


@pytest.mark.parametrize("fields, named", MULTI_REPLY_LINES)
def test_a_line_asking_for_more_than_one_reply_is_refused(capsys, tmp_path, fields, named):
    rows = [{"prompt": f"item {k}"} for k in range(6)]
    rows[4].update(fields)
    src = write_jsonl(tmp_path / "items.jsonl", rows)
    code, _, err = run_cli(capsys, "tune", src, "--model", tmp_path / "missing.gguf")
    assert code == 2
    line = single_error_line(err)
    assert f"{src}:5: {named}" in line
    assert "but tune compares one generated reply per item" in line


def test_an_empty_file_is_named(capsys, tmp_path):
    src = tmp_path / "empty.jsonl"
    src.write_text("", encoding="utf-8")
    code, _, err = run_cli(capsys, "tune", src, "--model", tmp_path / "missing.gguf")
    assert code == 2
    assert f"{src} holds no prompts: --rounds 3 needs at least 3" in single_error_line(err)


def test_plot_without_matplotlib_says_how_to_get_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    code, _, err = run_cli(capsys, "tune", EXAMPLES, "--plot", tmp_path / "t.png")
    assert code == 2
    line = single_error_line(err)
    assert "matplotlib" in line and "pip install 'llamabatch[plot]'" in line
    assert not (tmp_path / "t.png").exists()


def test_recommended_command_repeats_the_item_options(tmp_path):
    args = build_parser().parse_args(
        [
            "tune",
            "in.jsonl",
            "--temperature",
            "0",
            "--choices",
            "a,b",
            "--stop",
            "\n",
            "--raw",
            "--threads",
            "2",
            "--rounds",
            "2",
        ]
    )
    assert complete_args(args) == [
        "in.jsonl",
        "--temperature",
        "0.0",
        "--stop",
        "\n",
        "--choices",
        "a,b",
        "--raw",
        "--threads",
        "2",
    ]


@pytest.mark.real_model
def test_short_real_run_writes_a_report_json_and_plot(capsys, tmp_path, model_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()
    src = write_jsonl(tmp_path / "six.jsonl", [json.loads(line) for line in lines[:6]])
    out_json, out_png = tmp_path / "t.json", tmp_path / "t.png"
    code, out, err = run_cli(
        capsys,
        "tune",
        src,
        "--model",
        model_path,
        "--slots",
        "2",
        "--rounds",
        "2",
        "--items",
        "2",
        "--budget",
        "600",
        *FAST,
        "--json",
        out_json,
        "--plot",
        out_png,
    )
    assert code == 0, err
    assert "one_at_a_time" in out and "slots=2" in out
    assert f"llamabatch complete {src} --model {model_path}" in out
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert doc["schema"] == "llamabatch.tune/1" and doc["label_rule"] == "choices"
    assert doc["floor"]["measured"] is False  # --temperature 0
    (setting,) = doc["settings"]
    n = exact = label = 0
    for r in doc["rounds"]:
        runs = {run["setting"]: run["replies"] for run in r["runs"]}
        assert [rep["path"] for rep in runs["one_at_a_time"]] == ["create_completion"] * 2
        for a, b in zip(runs["one_at_a_time"], runs["slots=2"]):
            n += 1
            exact += a["text"] == b["text"]
            label += a["text"].strip() == b["text"].strip()
    assert n == 4
    assert setting["exact_share"] == pytest.approx(100 * exact / n)
    assert setting["label_share"] == pytest.approx(100 * label / n)
    assert setting["kv_mib_per_slot"] > 0 and setting["kv_mib_total"] > 0
    # 6 prompts hold 2 rounds of 2 fresh items besides the warm-up: --budget adds none
    assert doc["n_rounds"] == 2
    assert len(setting["ratio"]) == 2 and setting["ratio_interval"]["low"] > 0
    assert all(c > 0 for c in setting["cpu_s_per_item"])
    assert doc["recommendation"]["verdict"] in ("use", "does_not_pay", "cannot_tell")
    assert doc["recommendation"]["reason"]
    assert set(doc["noise"]) == {"n_cores", "load_max", "busy", "settings", "warnings"}
    assert "95 % interval" in out and "CPU s/item" in out
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
