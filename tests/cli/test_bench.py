"""``llamabatch bench`` on the fake backend: table shapes, arithmetic, JSON schema, CLI output.

Timings are never asserted: the clocks here are scripted.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from pathlib import Path

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.bench.host import collect_header, quantization
from llamabatch.bench.report import SCHEMA, document, format_raw_table, parse_raw_table
from llamabatch.cli.bench import BenchParams, BenchSetup, bench
from llamabatch.cli.main import main
from llamabatch.measure.raw import RAW_COLUMNS, ctx_per_seq, raw_row, run_raw
from llamabatch.measure.workload import (
    SYSTEM,
    format_workload_table,
    ratios,
    run_workload,
    tagging_prompts,
    warmup_prompt,
    workload_json,
)
from llamabatch.testing import DecodeCall, FakeBackend, StartSeqCall

SLOTS = (1, 2, 4, 8)

# What llama-batched-bench prints (format strings of tools/batched-bench/batched-bench.cpp).
BATCHED_BENCH_OUTPUT = """
main: n_kv_max = 2560, n_batch = 512, n_ubatch = 512, flash_attn = 0, is_pp_shared = 0

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   256 |     64 |    1 |    320 |    0.969 |   264.19 |    0.771 |    83.01 |    1.740 |   183.91 |
|   256 |     64 |    2 |    640 |    1.610 |   318.01 |    1.207 |   106.04 |    2.817 |   227.19 |

llama_perf_context_print:        load time =     123.45 ms
"""


def step_clock(step: float = 1.0):
    """A clock that advances by ``step`` on every call."""
    counter = itertools.count()
    return lambda: next(counter) * step


def raw_fake() -> FakeBackend:
    # No EOG: the raw bench decodes a fixed number of tokens, whatever is sampled.
    return FakeBackend(eog_ids=(), n_vocab=300)


# -- raw ---------------------------------------------------------------------------------
def test_raw_rows_one_per_b_with_batched_bench_arithmetic():
    fake = raw_fake()
    rows, limits = run_raw(fake, SLOTS, 20, 5, rounds=3, n_batch=32, clock=step_clock())
    assert [r.b for r in rows] == list(SLOTS)
    assert limits.n_seq_max == max(SLOTS) and limits.n_ctx_seq >= 25
    for r in rows:
        assert (r.pp, r.tg) == (20, 5)
        assert r.n_kv == r.b * (20 + 5)
        assert len(r.rounds) == 3
        assert math.isclose(r.s_pp, r.b * r.pp / r.t_pp)
        assert math.isclose(r.s_tg, r.b * r.tg / r.t_tg)
        assert math.isclose(r.t, r.t_pp + r.t_tg)
        assert math.isclose(r.s, r.n_kv / r.t)
        assert len(r.values()) == len(RAW_COLUMNS)
    assert fake.violations == []


def test_raw_drives_the_slot_engine_and_feeds_back_samples():
    fake = raw_fake()
    run_raw(fake, (3,), 40, 4, rounds=1, n_batch=32, clock=step_clock())
    decodes = fake.calls(DecodeCall)
    assert all(d.n_tokens <= 32 for d in decodes)
    assert decodes[0].n_tokens == 16  # the warm-up: 16 tokens
    timed = decodes[1:]
    # 3 prompts of 40 tokens through 32-token decodes, prompts ending early decode in
    # the same calls (decode tokens first), then each sequence fed back 4 samples
    assert sum(d.n_tokens for d in timed) == 3 * (40 + 4)
    positions = {s: [] for s in range(3)}
    for d in timed:
        for span in d.spans:
            positions[span.seq_id] += range(span.pos, span.pos + len(span.tokens))
    assert positions == {s: list(range(44)) for s in range(3)}
    assert timed[2].spans[0] == (timed[2].spans[0].__class__(0, 40, (timed[1].sampled[0],), True))
    assert fake.violations == []  # fed back what was sampled
    assert all(c.sampling.is_greedy for c in fake.calls(StartSeqCall))


def test_raw_row_is_the_median_of_rounds():
    row = raw_row(256, 64, 4, [(1.0, 9.0), (3.0, 7.0), (2.0, 8.0)])
    assert (row.t_pp, row.t_tg) == (2.0, 8.0)
    assert row.n_kv == 4 * 320
    assert row.to_json()["rounds"] == [
        {"t_pp": 1.0, "t_tg": 9.0},
        {"t_pp": 3.0, "t_tg": 7.0},
        {"t_pp": 2.0, "t_tg": 8.0},
    ]
    with pytest.raises(ValueError):
        raw_row(1, 1, 1, [])


def test_raw_asks_for_whole_multiples_of_llama_cpp_padding():
    assert [ctx_per_seq(n) for n in (1, 256, 257, 320)] == [256, 256, 512, 512]
    fake = raw_fake()
    run_raw(fake, (2,), 20, 5, rounds=1)
    assert fake.limits.n_ctx_seq == 256


def test_raw_refuses_sizes_that_do_not_fit():
    with pytest.raises(ValueError, match="n_batch"):
        run_raw(raw_fake(), (8,), 4, 4, n_batch=4)
    with pytest.raises(ValueError, match="slots"):
        run_raw(raw_fake(), (0, 2), 4, 4)


def test_raw_table_has_batched_bench_columns_and_parses_back():
    rows = [raw_row(256, 64, b, [(0.5 * b, 0.25 * b)]) for b in SLOTS]
    table = format_raw_table(rows)
    lines = table.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == list(RAW_COLUMNS)
    assert len(lines) == 2 + len(SLOTS)
    parsed = parse_raw_table(table)
    assert [p["B"] for p in parsed] == list(SLOTS)
    assert [p["N_KV"] for p in parsed] == [b * 320 for b in SLOTS]
    assert parsed[1]["S_PP t/s"] == pytest.approx(rows[1].s_pp, abs=0.01)


def test_parse_batched_bench_output():
    parsed = parse_raw_table(BATCHED_BENCH_OUTPUT)
    assert [(p["PP"], p["TG"], p["B"], p["N_KV"]) for p in parsed] == [
        (256, 64, 1, 320),
        (256, 64, 2, 640),
    ]
    assert parsed[0]["S_TG t/s"] == 83.01


# -- header and JSON ---------------------------------------------------------------------
def test_quantization_from_metadata_then_file_name():
    assert quantization("x/SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quantization("Qwen3.5-4B-Q4_K_M.gguf") == "Q4_K_M"
    assert quantization("model.gguf", {"general.file_type": "15"}) == "Q4_K_M"
    assert quantization("model.gguf") == "unknown"


HEADER_TYPES = {
    "started_at": str,
    "host": str,
    "platform": str,
    "python": str,
    "cpu_model": str,
    "cpu_count": int,
    "threads": (int, type(None)),
    "gpu_offload": bool,
    "n_gpu_layers": int,
    "devices": list,
    "system_info": (str, type(None)),
    "model_path": str,
    "model_name": (str, type(None)),
    "model_arch": (str, type(None)),
    "model_size_bytes": (int, type(None)),
    "quantization": str,
    "n_ctx_seq": (int, type(None)),
    "n_batch": int,
    "llama_cpp_python_version": str,
    "llama_cpp_version": str,
}
RAW_ROW_TYPES = {
    "pp": int,
    "tg": int,
    "pl": int,
    "n_kv": int,
    "t_pp": float,
    "speed_pp": float,
    "t_tg": float,
    "speed_tg": float,
    "t": float,
    "speed": float,
    "rounds": list,
}
WORKLOAD_ROW_TYPES = {
    "b": int,
    "per_item_s": list,
    "median_per_item_s": float,
    "ratio": list,
    "ratio_median": float,
    "ratio_min": float,
    "ratio_max": float,
    "items_per_hour": float,
    "tokens_per_item": float,
    "items_batched": int,
    "items_alone": int,
    "items_failed": int,
    "first_error": (str, type(None)),
    "batch_disabled_reason": (str, type(None)),
}


def check_types(obj: dict, types: dict) -> None:
    assert set(obj) == set(types), set(obj) ^ set(types)
    for key, t in types.items():
        assert isinstance(obj[key], t), (key, obj[key])


def check_document(doc: dict, slots=SLOTS) -> None:
    doc = json.loads(json.dumps(doc))  # what a reader of the file sees
    assert set(doc) == {"schema", "header", "params", "raw", "workload", "wall_s"}
    assert doc["schema"] == SCHEMA
    check_types(doc["header"], HEADER_TYPES)
    assert doc["raw"]["columns"] == list(RAW_COLUMNS)
    assert [r["pl"] for r in doc["raw"]["rows"]] == list(slots)
    for row in doc["raw"]["rows"]:
        check_types(row, RAW_ROW_TYPES)
        assert row["n_kv"] == row["pl"] * (row["pp"] + row["tg"])
    assert set(doc["params"]) == {
        "slots",
        "prompt_tokens",
        "gen_tokens",
        "rounds",
        "items",
        "workload_rounds",
        "max_tokens",
        "n_batch",
        "seed",
        "parts",
        "workload",
        "prompts",
        "temperature",
        "n_ctx_seq",
    }
    w = doc["workload"]
    assert set(w) == {
        "items",
        "rounds",
        "max_tokens",
        "n_ctx_seq",
        "prompt_tokens",
        "rows",
        "name",
        "prompts",
    }
    assert (w["prompts"] is None) == (doc["params"]["prompts"] is None)
    assert len(w["prompt_tokens"]) == w["items"]
    assert [r["b"] for r in w["rows"]] == [1] + [b for b in slots if b > 1]
    for row in w["rows"]:
        check_types(row, WORKLOAD_ROW_TYPES)
        assert len(row["per_item_s"]) == len(row["ratio"]) == w["rounds"]
    assert isinstance(doc["wall_s"], float)


def test_header_without_library(tmp_path):
    model = tmp_path / "tiny.Q8_0.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    h = collect_header(model_path=str(model), threads=2, n_ctx_seq=512, with_library=False)
    check_types(h, HEADER_TYPES)
    assert h["quantization"] == "Q8_0" and h["model_size_bytes"] == 64
    assert h["gpu_offload"] is False and h["devices"] == []


# -- workload ----------------------------------------------------------------------------
def test_tagging_prompts_are_chatml_deterministic_and_near_the_target():
    tok = lambda s: list(s.encode())  # noqa: E731
    a = tagging_prompts(6, 400, tok, seed=3)
    assert a == tagging_prompts(6, 400, tok, seed=3)
    assert a != tagging_prompts(6, 400, tok, seed=4)
    for p in a:
        assert p.startswith("<|im_start|>system\n" + SYSTEM)
        assert p.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert 0.6 * 400 <= len(tok(p)) <= 1.4 * 400 + 100
    assert len({len(tok(p)) for p in a}) > 1


def test_ratios_per_round():
    assert ratios([1.0, 3.0], [2.0, 4.0]) == [0.5, 0.75]
    with pytest.raises(ValueError):
        ratios([1.0], [1.0, 2.0])


def scripted_clock(durations):
    """A clock whose successive (start, end) pairs are ``durations`` apart."""
    t, values = 0.0, []
    for d in durations:
        values += [t, t + d]
        t += d + 1.0
    it = iter(values)
    return lambda: next(it)


def fake_generator(max_tokens=16):
    def make(b: int) -> BatchGenerator:
        fake = FakeBackend(max_tokens=max_tokens)
        return BatchGenerator(
            backend=fake,
            slots=b,
            max_tokens=max_tokens,
            n_ctx_seq=4096,
            sampling=SamplingParams(temperature=0.0),
        )

    return make


def test_workload_ratios_come_from_each_rounds_times():
    prompts = [f"item {i}" for i in range(4)]
    # round 1: alone 8 s, B=2 6 s, B=4 4 s; round 2: alone 10 s, B=2 9 s, B=4 5 s
    clock = scripted_clock([8, 6, 4, 10, 9, 5])
    rows = run_workload(fake_generator(), prompts, (1, 2, 4), rounds=2, clock=clock)
    assert [r.b for r in rows] == [1, 2, 4]
    alone, b2, b4 = rows
    assert alone.per_item_s == [2.0, 2.5]
    assert b2.per_item_s == [1.5, 2.25] and b2.ratio == [0.75, 0.9]
    assert b4.ratio == [0.5, 0.5]
    assert alone.ratio == [1.0, 1.0]
    assert b2.median_per_item_s == pytest.approx(1.875)
    assert b2.items_per_hour == pytest.approx(3600 / 1.875)
    j = b2.to_json()
    assert (j["ratio_min"], j["ratio_max"]) == (0.75, 0.9)
    assert j["ratio_median"] == pytest.approx(0.825)
    # every timed item of B > 1 went through the batch; alone ones through generate_alone
    assert b2.items_batched == 8 and b2.items_alone == 0
    assert alone.items_alone == 8
    assert b2.tokens == alone.tokens  # same replies batched and alone


def test_the_baseline_is_the_callers_own_loop_when_one_is_given():
    seen: list[list[str]] = []

    def one_at_a_time(prompts):
        seen.append(list(prompts))
        return 5 * len(prompts)

    prompts = ["a", "b", "c", "d"]
    clock = scripted_clock([8, 4, 8, 2])  # round 1: alone 8 s, B=2 4 s; round 2
    rows = run_workload(
        fake_generator(), prompts, (2,), rounds=2, clock=clock, one_at_a_time=one_at_a_time
    )
    alone, b2 = rows
    assert seen == [[warmup_prompt()], prompts, prompts]  # warm-up, then 2 rounds
    assert alone.per_item_s == [2.0, 2.0] and alone.tokens == [20, 20]
    assert alone.items_alone == 8 and alone.items_batched == 0
    assert b2.ratio == [0.5, 0.25] and b2.items_batched == 8


def test_workload_table_lists_alone_then_each_b():
    clock = scripted_clock([4, 2, 4, 3])
    rows = run_workload(fake_generator(), ["a", "b"], (2,), rounds=2, clock=clock)
    lines = format_workload_table(rows).splitlines()
    assert len(lines) == 2 + 2
    assert lines[2].split("|")[1].strip() == "alone"
    assert lines[3].split("|")[1].strip() == "2"
    doc = workload_json(rows, [3, 4], 2, 16)
    assert doc["prompt_tokens"] == [3, 4] and [r["b"] for r in doc["rows"]] == [1, 2]


# -- the command -------------------------------------------------------------------------
def fake_setup(tmp_path: Path, max_tokens: int) -> BenchSetup:
    model = tmp_path / "fake.Q4_1.gguf"
    model.write_bytes(b"GGUF" + bytes(12))
    tokenizer = FakeBackend()

    def make_generator(b: int, n_ctx_seq: int, max_tokens: int) -> BatchGenerator:
        return BatchGenerator(
            backend=FakeBackend(max_tokens=max_tokens),
            slots=b,
            n_ctx_seq=n_ctx_seq,
            max_tokens=max_tokens,
            sampling=SamplingParams(temperature=0.0),
        )

    header = collect_header(model_path=str(model), threads=2, with_library=False)
    return BenchSetup(raw_fake, make_generator, tokenizer.tokenize, header)


def test_bench_prints_header_and_both_tables_and_writes_json(tmp_path):
    params = BenchParams(
        slots=SLOTS,
        prompt_tokens=200,
        gen_tokens=8,
        rounds=2,
        items=4,
        workload_rounds=2,
        max_tokens=12,
    )
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "bench.json"
    doc = bench(fake_setup(tmp_path, 12), params, out=out, err=err, json_path=path, quiet=True)
    text = out.getvalue()
    assert text.startswith("llamabatch bench")
    for word in ("cpu:", "gpu:", "model:", "fake.Q4_1.gguf (Q4_1", "context:", "versions:"):
        assert word in text
    raw = parse_raw_table(text)
    assert [r["B"] for r in raw] == list(SLOTS)
    assert all(r["PP"] == 200 and r["TG"] == 8 for r in raw)
    assert "| alone |" in text
    check_document(doc)
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    assert doc["header"]["n_ctx_seq"] >= 208
    assert doc["params"]["slots"] == list(SLOTS)


def test_bench_only_raw(tmp_path):
    params = BenchParams(slots=(1, 2), prompt_tokens=30, gen_tokens=3, rounds=1, parts=("raw",))
    out = io.StringIO()
    doc = bench(fake_setup(tmp_path, 8), params, out=out, err=io.StringIO(), quiet=True)
    assert doc["workload"] is None and len(doc["raw"]["rows"]) == 2
    assert "alone" not in out.getvalue()


def test_document_without_parts_is_still_json():
    doc = document({"a": 1}, {"slots": [1]}, None, None, 0.5)
    assert json.loads(json.dumps(doc))["raw"] is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--slots", "1,x"], "comma-separated"),
        (["bench", "--slots", "0,2"], ">= 1"),
        (["bench", "--rounds", "0"], "rounds"),
        (["bench", "--slots", "1,8", "--n-batch", "4"], "n_batch"),
        (["bench", "--model", "/nonexistent/model.gguf"], "not found"),
    ],
)
def test_cli_usage_errors_are_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_cli_help_lists_the_options(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    for opt in (
        "--model",
        "--slots",
        "--prompt-tokens",
        "--gen-tokens",
        "--rounds",
        "--items",
        "--threads",
        "--n-gpu-layers",
        "--json",
    ):
        assert opt in out
