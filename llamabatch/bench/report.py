"""The bench's report: the JSON document (``llamabatch.bench/1``, its fields in
docs/bench.md), the header lines, the raw table (formatted and parsed) and the workload
table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..measure.raw import RAW_COLUMNS, RawRow
from ..measure.rounds import Round
from ..measure.summary import SettingReport
from ..stats import SPLIT_PARTS

SCHEMA = "llamabatch.bench/1"


def document(
    header: Mapping[str, Any],
    params: Mapping[str, Any],
    raw: Sequence[RawRow] | None,
    workload: Mapping[str, Any] | None,
    wall_s: float,
) -> dict[str, Any]:
    """The whole JSON document (see the module docstring)."""
    return {
        "schema": SCHEMA,
        "header": dict(header),
        "params": dict(params),
        "raw": None
        if raw is None
        else {"columns": list(RAW_COLUMNS), "rows": [r.to_json() for r in raw]},
        "workload": None if workload is None else dict(workload),
        "wall_s": wall_s,
    }


# -- header --------------------------------------------------------------------------------
def _mb(n: int | None) -> str:
    return "size unknown" if n is None else f"{n / 1e6:.1f} MB"


def format_header(h: dict[str, Any]) -> str:
    """The header lines printed above the tables."""
    gpus = [d for d in h.get("devices", []) if d["type"] in ("GPU", "IGPU")]
    if h["gpu_offload"]:
        names = ", ".join(
            f"{d['description'] or d['name']} ({d['name']}, {d['type']})" for d in gpus
        )
        layers = "all" if h["n_gpu_layers"] < 0 else str(h["n_gpu_layers"])
        gpu = f"{names}; {layers} layers offloaded"
    elif gpus:
        gpu = f"{', '.join(d['name'] for d in gpus)} present, no layers offloaded"
    else:
        gpu = "none (CPU only build or no GPU device)"
    threads = "llama.cpp default" if h["threads"] is None else str(h["threads"])
    name = h["model_path"].replace("\\", "/").rsplit("/", 1)[-1]
    arch = f", {h['model_arch']}" if h.get("model_arch") else ""
    return "\n".join(
        [
            f"llamabatch bench  {h['started_at']}  host {h['host']}",
            f"cpu:      {h['cpu_model']} ({h['cpu_count']} CPUs), threads {threads}",
            f"gpu:      {gpu}",
            f"model:    {name} ({h['quantization']}{arch}, {_mb(h['model_size_bytes'])})",
            f"          {h['model_path']}",
            f"context:  n_ctx_seq {h['n_ctx_seq'] or 'n/a'} per sequence "
            f"({h.get('n_ctx_seq_of', 'raw bench')}), "
            f"n_batch {h['n_batch']}",
            f"versions: llama-cpp-python {h['llama_cpp_python_version']}, "
            f"llama.cpp {h['llama_cpp_version']}",
        ]
    )


# -- tables --------------------------------------------------------------------------------
def format_raw_table(rows: Sequence[RawRow]) -> str:
    """The raw table, formatted exactly as llama-batched-bench's markdown table."""
    lines = [
        "|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |" % RAW_COLUMNS,
        "|%6s-|-%6s-|-%4s-|-%6s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|"
        % (
            "------",
            "------",
            "----",
            "------",
            "--------",
            "--------",
            "--------",
            "--------",
            "--------",
            "--------",
        ),
    ]
    for r in rows:
        lines.append(
            "|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |" % r.values()
        )
    return "\n".join(lines)


def format_split(rows: Sequence[RawRow]) -> str:
    """The lines after the raw table: per B, where a TG step's time went (ms per step and
    share of the step) and the share of rows sampled on the model's device."""
    lines = ["step split (TG steps, ms per step): decode, logits read, sampling, other"]
    for r in rows:
        split = r.split
        if split is None or split.steps == 0:
            continue
        ms, total = split.per_step_ms(), split.seconds * 1e3 / split.steps
        parts = ", ".join(
            f"{part} {ms[part]:.3f} ({100 * ms[part] / total if total else 0:.0f} %)"
            for part in SPLIT_PARTS
        )
        on_device = 100 * split.backend_sampled_rows / (split.steps * r.b)
        lines.append(f"  B={r.b:<3d} {parts}; {on_device:.0f} % of rows sampled on the device")
    return "\n".join(lines) if len(lines) > 1 else ""


def parse_raw_table(text: str) -> list[dict[str, float]]:
    """Rows of a markdown table in :data:`RAW_COLUMNS` (ours or llama-batched-bench's).

    Lines that are not rows of such a table are skipped, so the whole output of
    ``llama-batched-bench`` can be passed.

    Returns:
        one dict per row, keyed by the column names.
    """
    rows, header_seen = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(RAW_COLUMNS) or not line.lstrip().startswith("|"):
            continue
        if tuple(cells) == RAW_COLUMNS:
            header_seen = True
            continue
        if not header_seen:
            continue
        try:
            rows.append({k: float(v) for k, v in zip(RAW_COLUMNS, cells)})
        except ValueError:  # the |---|---| line
            continue
    return rows


def workload_rows(settings: Sequence[SettingReport], rounds: Sequence[Round]) -> list[dict]:
    """The workload's ``"rows"``: one at a time (``b`` 1) first, then each B."""
    rows = []
    for s in settings:
        last = [p.result for r in rounds if (p := r.get(s.setting)) and p.result is not None]
        rows.append(
            {
                "b": s.slots,
                "per_item_s": list(s.s_per_item),
                "median_per_item_s": s.s_per_item_median,
                "ratio": list(s.ratio),
                "ratio_median": s.ratio_median,
                "ratio_min": min(s.ratio),
                "ratio_max": max(s.ratio),
                "ratio_interval": None if s.ratio_interval is None else s.ratio_interval.to_json(),
                "cpu_per_item_s": list(s.cpu_s_per_item),
                "items_per_hour": s.items_per_hour,
                "tokens_per_item": s.tokens_per_item,
                "items_batched": s.items_batched,
                "items_alone": s.items_alone,
                "items_failed": s.n_failed,
                "first_error": s.first_error,
                "batch_disabled_reason": None
                if s.slots == 1 or not last
                else last[-1].batch_disabled_reason,
            }
        )
    return rows


def format_workload_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The workload table: per B (1: one at a time) the median s/item, the ratio to one at a
    time, items/hour."""
    head = ("B", "s/item", "ratio", "min", "max", "items/h", "tok/item", "batched")
    lines = [
        "|%6s | %8s | %6s | %6s | %6s | %8s | %8s | %7s |" % head,
        "|-------|----------|--------|--------|--------|----------|----------|---------|",
    ]
    for r in rows:
        n = r["items_batched"] + r["items_alone"]
        lines.append(
            "|%6s | %8.3f | %6.3f | %6.3f | %6.3f | %8.0f | %8.1f | %7s |"
            % (
                str(r["b"]),
                r["median_per_item_s"],
                r["ratio_median"],
                r["ratio_min"],
                r["ratio_max"],
                r["items_per_hour"],
                r["tokens_per_item"],
                f"{r['items_batched']}/{n}" if r["b"] > 1 else "-",
            )
        )
    return "\n".join(lines)
