"""``llamabatch bench --prompts FILE``: the workload's items from the user's file.

Usage errors and bad files are checked before any model work (the model named here does
not exist); the rounds are checked on the fake backend against the rounds tune draws;
one short real-model run shows a line's ``choices`` constraining both paths. No timing
is asserted.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_util import MULTI_REPLY_LINES, run_cli, single_error_line, write_jsonl
from clocks import scripted

from llamabatch import BatchGenerator, SamplingParams, tune
from llamabatch.measure.bench import BenchParams, BenchSetup, bench
from llamabatch.measure.host import collect_header
from llamabatch.measure.records import WorkItem
from llamabatch.testing import FakeBackend, StartSeqCall


def work(ids, prompts, samplings) -> list[WorkItem]:
    return [WorkItem(i, p, s) for i, p, s in zip(ids, prompts, samplings)]


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def items_file(tmp_path: Path, n: int, **fields) -> Path:
    return write_jsonl(
        tmp_path / "items.jsonl",
        [{"id": f"i{k}", "prompt": chat(f"Label ticket {k}."), **fields} for k in range(n)],
    )


def file_params(**fields) -> BenchParams:
    """The bench's parameters for the workload of items.jsonl alone."""
    return BenchParams(parts=("workload",), workload="prompts", prompts="items.jsonl", **fields)


def error_after_prog(line: str) -> str:
    """``"llamabatch X: error: MESSAGE"`` -> ``MESSAGE``."""
    return line.split(": error: ", 1)[1]


# -- usage, before any model work ----------------------------------------------------------
def test_prompts_with_workload_is_refused_naming_both(capsys, tmp_path):
    src = items_file(tmp_path, 4)
    code, _, err = run_cli(
        capsys, "bench", "--prompts", src, "--workload", "U", "--model", tmp_path / "no.gguf"
    )
    assert code == 2
    line = single_error_line(err)
    assert f"--prompts {src}" in line and "--workload U" in line and "give one" in line


def test_prompts_with_only_raw_is_refused(capsys, tmp_path):
    src = items_file(tmp_path, 4)
    code, _, err = run_cli(capsys, "bench", "--prompts", src, "--only", "raw")
    assert code == 2
    assert "--only raw skips the workload" in single_error_line(err)


@pytest.mark.parametrize(
    "flag",
    [
        ["--temperature", "0"],
        ["--n-ctx-seq", "512"],
        ["--format", "text"],
        ["--system", "be brief"],
        ["--raw"],
    ],
)
def test_file_options_need_prompts(capsys, tmp_path, flag):
    code, _, err = run_cli(capsys, "bench", *flag, "--model", tmp_path / "no.gguf")
    assert code == 2
    line = single_error_line(err)
    assert f"{flag[0]} applies to the items of --prompts FILE only" in line


@pytest.mark.parametrize(
    "content",
    [
        '{"id": "a", "prompt": "hi"}\n{"id": "b", "prompt": \n',  # malformed JSON
        '{"id": "a", "prompt": "hi"}\n{"id": "b", "text": "hi"}\n',  # no prompt
        '{"id": "a", "prompt": "hi", "temperature": -1}\n',  # a bad line field
        '{"id": "a", "prompt": "hi"}\n{"id": "a", "prompt": "again"}\n',  # a repeated id
        None,  # no such file
    ],
)
def test_a_bad_file_gives_the_error_complete_gives(capsys, tmp_path, content):
    src = tmp_path / "bad.jsonl"
    if content is not None:
        src.write_text(content, encoding="utf-8")
    missing = tmp_path / "no.gguf"
    code, _, err = run_cli(capsys, "complete", src, "--model", missing)
    assert code == 2
    expected = error_after_prog(single_error_line(err))
    code, _, err = run_cli(capsys, "bench", "--prompts", src, "--model", missing)
    assert code == 2
    line = single_error_line(err)
    assert line.startswith("llamabatch bench: error: ")
    assert error_after_prog(line) == expected
    assert str(src) in expected


def test_too_few_prompts_for_disjoint_rounds_is_refused_as_tune_refuses(capsys, tmp_path):
    """Each command in its own flags (tune's rounds are --rounds, the workload's
    --workload-rounds), both naming the file."""
    src = items_file(tmp_path, 5)
    missing = tmp_path / "no.gguf"
    code, _, err = run_cli(capsys, "tune", src, "--model", missing, "--rounds", "2", "--items", "3")
    assert code == 2
    assert error_after_prog(single_error_line(err)) == (
        f"--rounds 2 x --items 3 needs 6 distinct prompts, but {src} holds 5: "
        "give --items <= 2 or fewer --rounds"
    )
    code, _, err = run_cli(
        capsys,
        "bench",
        "--prompts",
        src,
        "--model",
        missing,
        "--workload-rounds",
        "2",
        "--items",
        "3",
    )
    assert code == 2
    assert error_after_prog(single_error_line(err)) == (
        f"--workload-rounds 2 x --items 3 needs 6 distinct prompts, but {src} holds 5: "
        "give --items <= 2 or fewer --workload-rounds"
    )


@pytest.mark.parametrize(
    "argv, says",
    [
        (["tune", "{src}", "--rounds", "1"], "{src} holds no prompts: --rounds 1"),
        (
            ["bench", "--prompts", "{src}", "--workload-rounds", "1"],
            "{src} holds no prompts: --workload-rounds 1",
        ),
    ],
)
def test_an_empty_file_is_named_by_both_commands(capsys, tmp_path, argv, says):
    src = tmp_path / "empty.jsonl"
    src.write_text("", encoding="utf-8")
    argv = [a.format(src=src) for a in argv]
    code, _, err = run_cli(capsys, *argv, "--model", tmp_path / "no.gguf")
    assert code == 2
    assert says.format(src=src) in single_error_line(err)


@pytest.mark.parametrize("fields, named", MULTI_REPLY_LINES)
def test_a_line_asking_for_more_than_one_reply_is_refused(capsys, tmp_path, fields, named):
    rows = [{"id": f"i{k}", "prompt": chat(f"Label ticket {k}.")} for k in range(6)]
    rows[2].update(fields)
    src = write_jsonl(tmp_path / "items.jsonl", rows)
    code, _, err = run_cli(capsys, "bench", "--prompts", src, "--model", tmp_path / "no.gguf")
    assert code == 2
    line = single_error_line(err)
    assert f"{src}:3: {named}" in line
    assert "but bench compares one generated reply per item" in line


def test_the_library_bench_refuses_an_item_asking_for_more_than_one_reply(tmp_path):
    samplings = [SamplingParams(temperature=0.0)] * 4
    samplings[1] = SamplingParams(temperature=0.0, n=2)
    items = work(list("abcd"), PROMPTS[:4], samplings)
    params = file_params(slots=(1, 2), items=2)
    backends: list[FakeBackend] = []
    with pytest.raises(ValueError, match="items.jsonl item 'b': n=2 asks for 2 replies"):
        bench(fake_setup(tmp_path, backends), params, quiet=True, items=items)
    assert backends == []  # refused before any generator was made


def test_help_names_prompts(capsys):
    code, out, _ = run_cli(capsys, "bench", "--help")
    assert code == 0
    for flag in ("--prompts", "--format", "--system", "--template", "--raw", "--temperature"):
        assert flag in out, flag


# -- rounds, on the fake backend -----------------------------------------------------------


def fake_setup(tmp_path: Path, backends: list[FakeBackend], reply: str = "bug") -> BenchSetup:
    """Generators on fakes that reply ``reply`` to every prompt (kept in ``backends``)."""
    model = tmp_path / "fake.Q4_1.gguf"
    model.write_bytes(b"GGUF" + bytes(12))

    def make_generator(b: int, n_ctx_seq: int, max_tokens: int) -> BatchGenerator:
        backends.append(FakeBackend(reply=lambda tokens: reply, max_tokens=max_tokens))
        return BatchGenerator(
            backend=backends[-1], slots=b, n_ctx_seq=n_ctx_seq, max_tokens=max_tokens
        )

    header = collect_header(model_path=str(model), threads=2, with_library=False)
    return BenchSetup(FakeBackend, make_generator, FakeBackend().tokenize, header)


PROMPTS = [f"ticket {k:02d}: something about item {k}" for k in range(10)]
LABELS = ("billing", "bug")


def test_rounds_are_disjoint_and_the_ones_tune_draws_with_the_same_figures(tmp_path):
    """One runner: the same file, seed and rounds give bench and tune the same disjoint
    rounds and the same passes in the same order, so the same pass times give the same
    per-setting figures."""
    samplings = [SamplingParams(temperature=0.0, choices=LABELS)] * len(PROMPTS)
    ids = [f"t{k:02d}" for k in range(len(PROMPTS))]
    items = work(ids, PROMPTS, samplings)
    params = file_params(
        slots=(1, 2, 4), items=3, workload_rounds=3, max_tokens=6, n_ctx_seq=256, seed=5
    )
    seconds = [3.0, 2.0, 1.5, 1.0, 1.75, 2.5, 4.0, 1.25, 2.0]  # 3 rounds x 3 settings
    backends: list[FakeBackend] = []
    out = io.StringIO()
    setup = fake_setup(tmp_path, backends)
    doc = bench(setup, params, out=out, quiet=True, items=items, clock=scripted(seconds))
    doc = json.loads(json.dumps(doc))
    w = doc["workload"]
    assert w["name"] == "prompts" and doc["params"]["prompts"] == "items.jsonl"
    rounds = w["prompts"]["item_ids"]
    assert [len(r) for r in rounds] == [3, 3, 3]
    flat = [i for r in rounds for i in r]
    assert len(set(flat)) == 9  # disjoint
    assert w["prompts"]["warmup_id"] not in flat  # the one item in no round warms up
    assert [r["b"] for r in w["rows"]] == [1, 2, 4]
    assert all(row["items_failed"] == 0 for row in w["rows"])
    report = tune(
        None,
        PROMPTS,
        slots=(2, 4),
        rounds=3,
        items=3,
        items_seed=5,
        ids=ids,
        sampling=samplings,
        backend=lambda b: FakeBackend(),
        clock=scripted(seconds, first=[0.0], last=[99.0]),  # tune also times the whole run
    )
    assert [r["item_ids"] for r in report.to_json()["rounds"]] == rounds
    rows = {r["b"]: r for r in w["rows"]}
    for s in (report.one_at_a_time, *report.settings):
        assert rows[s.slots]["per_item_s"] == pytest.approx(list(s.s_per_item))
        assert rows[s.slots]["ratio"] == pytest.approx(list(s.ratio))
    assert rows[4]["ratio"] != rows[2]["ratio"]  # the clock told the settings apart
    # every item, on both paths (B=1 here is BatchGenerator(slots=1)), had its constraint
    starts = [c for fake in backends for c in fake.calls(StartSeqCall)]
    assert starts and all(c.sampling.choices == LABELS for c in starts)
    assert "workload prompts (items.jsonl): 3 items per round of 10" in out.getvalue()


def test_only_the_workload_shows_its_context_in_the_header(tmp_path):
    items = work(list("abcd"), PROMPTS[:4], [SamplingParams()] * 4)
    params = file_params(
        slots=(1, 2),
        items=2,
        workload_rounds=1,
        max_tokens=2,
        n_ctx_seq=48,
    )
    out = io.StringIO()
    doc = bench(
        fake_setup(tmp_path, []), params, out=out, err=io.StringIO(), quiet=True, items=items
    )
    assert "n_ctx_seq 48 per sequence (workload)" in out.getvalue()
    assert doc["header"]["n_ctx_seq"] == doc["workload"]["n_ctx_seq"] == 48
    synthetic = BenchParams(slots=(1, 2), parts=("workload",), workload="U", items=2, max_tokens=2)
    out = io.StringIO()
    doc = bench(fake_setup(tmp_path, []), synthetic, out=out, err=io.StringIO(), quiet=True)
    n_ctx_seq = doc["workload"]["n_ctx_seq"]
    assert f"n_ctx_seq {n_ctx_seq} per sequence (workload)" in out.getvalue()


def test_failed_items_are_counted_and_named(tmp_path):
    samplings = [SamplingParams(temperature=0.0, choices=("billing", "account"))] * 4
    items = work(list("abcd"), PROMPTS[:4], samplings)
    params = file_params(
        slots=(1, 2), items=2, workload_rounds=2, max_tokens=3, n_ctx_seq=256
    )  # max_tokens: too few for either choice
    out = io.StringIO()
    setup = fake_setup(tmp_path, [], reply="billing")
    doc = bench(setup, params, out=out, err=io.StringIO(), quiet=True, items=items)
    for row in doc["workload"]["rows"]:
        assert row["items_failed"] == 4
        assert "raise max_tokens" in row["first_error"]
    assert "note: one at a time: 4 of 4 items failed (first: max_tokens ended" in out.getvalue()
    assert "note: B=2: 4 of 4 items failed" in out.getvalue()


def test_bench_wants_the_items_exactly_when_params_name_a_file(tmp_path):
    items = work(["a"], ["x"], [SamplingParams()])
    setup = fake_setup(tmp_path, [])
    with pytest.raises(ValueError, match="give items exactly when"):
        bench(setup, BenchParams(parts=("workload",)), quiet=True, items=items)
    params = BenchParams(parts=("workload",), workload="prompts", prompts="f", items=1)
    with pytest.raises(ValueError, match="give items exactly when"):
        bench(setup, params, quiet=True)


# -- the real model ------------------------------------------------------------------------
STORIES = [
    {"id": "p", "prompt": chat("Write a long story about the sea.")},
    {"id": "m", "messages": [{"role": "user", "content": "Write a long story about a ship."}]},
]


@pytest.mark.real_model
def test_a_lines_choices_constrain_both_paths(capsys, tmp_path, model_path):
    """A story prompt runs to --max-tokens unless its line's choices end it after the
    one choice: tokens per item tell, on one at a time and on the engine alike."""

    def tokens_per_item(rows: list[dict], name: str) -> dict[int, float]:
        src = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        out_json = tmp_path / f"{name}.json"
        code, out, err = run_cli(
            capsys,
            "bench",
            "--prompts",
            src,
            "--only",
            "workload",
            "--slots",
            "1,2",
            "--items",
            "2",
            "--workload-rounds",
            "1",
            "--max-tokens",
            "16",
            "--n-ctx-seq",
            "512",
            "--temperature",
            "0",
            "--threads",
            "1",
            "--model",
            model_path,
            "--json",
            out_json,
            "--quiet",
        )
        assert code == 0, err
        assert "workload prompts" in out
        doc = json.loads(out_json.read_text(encoding="utf-8"))
        assert sorted(doc["workload"]["prompts"]["item_ids"][0]) == ["m", "p"]
        rows = doc["workload"]["rows"]
        assert all(r["items_failed"] == 0 for r in rows)
        assert rows[1]["items_batched"] == 2
        return {r["b"]: r["tokens_per_item"] for r in rows}

    free = tokens_per_item(STORIES, "free")
    # the Llama is sized from --n-ctx-seq as in tune, not from the raw bench's PP + TG
    # (512): a ~300-token prompt fits neither one at a time nor a slot of 256
    long_rows = [{"id": k, "prompt": chat("word " * 300)} for k in "pm"]
    src = write_jsonl(tmp_path / "long.jsonl", long_rows)
    code, out, err = run_cli(
        capsys,
        "bench",
        "--prompts",
        src,
        "--only",
        "workload",
        "--slots",
        "1,2",
        "--items",
        "2",
        "--workload-rounds",
        "1",
        "--n-ctx-seq",
        "16",
        "--max-tokens",
        "4",
        "--threads",
        "1",
        "--model",
        model_path,
        "--json",
        tmp_path / "long.json",
        "--quiet",
    )
    assert code == 0, err
    assert "n_ctx_seq 16 per sequence (workload)" in out
    rows = json.loads((tmp_path / "long.json").read_text(encoding="utf-8"))["workload"]["rows"]
    assert [r["items_failed"] for r in rows] == [2, 2]
    constrained = tokens_per_item([{**s, "choices": ["yes"]} for s in STORIES], "choices")
    assert free == {1: 16.0, 2: 16.0}
    assert all(t <= 3 for t in constrained.values()), constrained
