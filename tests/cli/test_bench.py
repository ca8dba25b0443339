"""``llamabatch bench`` on the fake backend: table shapes, arithmetic, JSON schema, CLI output.

Timings are never asserted: the clocks here are scripted.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from clocks import scripted

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.cli.main import main
from llamabatch.measure.bench import BenchParams, BenchSetup, bench
from llamabatch.measure.host import collect_header, quantization
from llamabatch.measure.raw import RAW_COLUMNS, raw_row
from llamabatch.measure.report import BENCH_SCHEMA as SCHEMA
from llamabatch.measure.report import document, format_raw_table, parse_raw_table
from llamabatch.measure.stats import Interval
from llamabatch.stats import SPLIT_PARTS
from llamabatch.testing import FakeBackend

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


def raw_fake() -> FakeBackend:
    # No EOG: the raw bench decodes a fixed number of tokens, whatever is sampled.
    return FakeBackend(eog_ids=(), n_vocab=300)


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
    "split": dict,
}
WORKLOAD_ROW_TYPES = {
    "b": int,
    "per_item_s": list,
    "median_per_item_s": float,
    "ratio": list,
    "ratio_median": float,
    "ratio_min": float,
    "ratio_max": float,
    "ratio_interval": (dict, type(None)),
    "cpu_per_item_s": list,
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
        split = row["split"]
        assert set(split) == {"steps", "backend_sampled_rows"} | {f"{p}_s" for p in SPLIT_PARTS}
        assert 0 < split["steps"] <= row["tg"] * len(row["rounds"])  # TG steps, all rounds
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
        "noise",
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
    split_lines = text.split("step split (TG steps, ms per step)")[1].splitlines()[
        1 : 1 + len(SLOTS)
    ]
    assert [line.split()[0] for line in split_lines] == [f"B={b}" for b in SLOTS]
    assert all(
        "decode" in line and "% of rows sampled on the device" in line for line in split_lines
    )
    assert "one at a time" in text and "|     1 |    " in text
    check_document(doc)
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    assert doc["header"]["n_ctx_seq"] >= 208
    assert doc["params"]["slots"] == list(SLOTS)


def test_workload_table_lists_one_at_a_time_then_each_b_with_each_rounds_ratio(tmp_path):
    params = BenchParams(
        slots=(1, 2), parts=("workload",), workload="U", items=2, workload_rounds=2, max_tokens=4
    )
    out = io.StringIO()
    # round 1: one at a time 4 s, B=2 2 s; round 2 (the order reversed): B=2 3 s, B=1 4 s
    clock = scripted([4, 2, 3, 4])
    doc = bench(fake_setup(tmp_path, 4), params, out=out, err=out, quiet=True, clock=clock)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("|")]
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["1", "2"]
    one, b2 = doc["workload"]["rows"]
    assert one["per_item_s"] == [2.0, 2.0] and one["ratio"] == [1.0, 1.0]
    assert b2["per_item_s"] == [1.0, 1.5] and b2["ratio"] == [0.5, 0.75]
    assert (b2["ratio_min"], b2["ratio_max"], b2["items_batched"]) == (0.5, 0.75, 4)
    # tune's interval and noise figures, from the same code
    assert b2["ratio_interval"] == Interval.of([0.5, 0.75]).to_json()
    assert one["ratio_interval"] == {"low": 1.0, "high": 1.0}
    assert len(b2["cpu_per_item_s"]) == 2
    noise = doc["workload"]["noise"]
    assert set(noise) == {"n_cores", "load_max", "busy", "settings", "warnings"}
    # the scripted clock gives seconds per pass the fake spends no CPU on: wall >> CPU
    assert any(w.startswith("this process got 0.0") for w in noise["warnings"])
    assert "warning: this process got 0.0" in out.getvalue()
    assert len(doc["workload"]["prompt_tokens"]) == 2 and "workload U: 2 items" in out.getvalue()


def test_bench_only_raw(tmp_path):
    params = BenchParams(slots=(1, 2), prompt_tokens=30, gen_tokens=3, rounds=1, parts=("raw",))
    out = io.StringIO()
    doc = bench(fake_setup(tmp_path, 8), params, out=out, err=io.StringIO(), quiet=True)
    assert doc["workload"] is None and len(doc["raw"]["rows"]) == 2
    assert "one at a time" not in out.getvalue()


def test_document_without_parts_is_still_json():
    doc = document({"a": 1}, {"slots": [1]}, None, None, 0.5)
    assert json.loads(json.dumps(doc))["raw"] is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--slots", "1,x"], "comma-separated"),
        (["bench", "--slots", "0,2"], ">= 1"),
        (["bench", "--rounds", "0"], "rounds"),
        (
            ["bench", "--slots", "1,8", "--n-batch", "4"],
            "--n-batch 4 is out of range: valid is >= 8",
        ),
        (["bench", "--model", "/nonexistent/model.gguf"], "not found"),
        (["bench", "--json", "/nonexistent/x.json"], "--json /nonexistent/x.json: cannot write"),
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
