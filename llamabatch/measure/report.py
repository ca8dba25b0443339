"""The one report module of the measurements: :class:`TuneReport` (``llamabatch tune``'s
result, its table and JSON document ``llamabatch.tune/1``), ``llamabatch bench``'s JSON
document (``llamabatch.bench/1``, its fields in docs/bench.md), header lines, raw table
(formatted and parsed) and workload table, and the JSON helpers both use."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..stats import SPLIT_PARTS
from .compare import FLOOR, setting_slots
from .noise import Noise
from .raw import RAW_COLUMNS, RawRow
from .rounds import Round
from .stats import Interval
from .summary import Floor, SettingReport
from .verdict import Recommendation

#: ``"schema"`` of the JSON document of ``llamabatch tune``.
TUNE_SCHEMA = "llamabatch.tune/1"
#: ``"schema"`` of the JSON document of ``llamabatch bench``.
BENCH_SCHEMA = "llamabatch.bench/1"


def json_ready(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as dicts, tuples as lists, infinities
    and NaN as ``None`` (JSON has neither)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_ready(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike[str], doc: Mapping[str, Any], indent: int) -> None:
    """Write ``doc`` to ``path`` as UTF-8 JSON, ``indent`` spaces a level, and a newline."""
    text = json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


@dataclass(frozen=True, slots=True)
class TuneReport:
    """Which slot count pays on this machine, model and items, and how the replies agree.

    The fields are the JSON document's (:meth:`to_json`).

    Attributes:
        model: the model file's name, or ``None`` when unknown.
        n_prompts: prompts given (the ETA is for all of them).
        items_per_round, n_rounds: items each round completed, and rounds.
        slots: the engine's slot counts tried.
        sampling: the base :class:`~llamabatch.SamplingParams` as a dict (items may set
            their own fields on top).
        max_tokens: the reply cap.
        label_rule: ``"choices"``, ``"json_schema"``, ``"label_regex"`` or ``None``.
        label_regex: the pattern, for ``"label_regex"``.
        items_seed: seed of the sample of items.
        min_gain_pct, max_agreement_drop: the recommendation's thresholds.
        one_at_a_time: one at a time (``Llama.create_completion`` / ``create_chat_completion``).
        settings: the engine at each slot count, in ``slots`` order.
        floor: agreement of two one-at-a-time runs.
        agreement_against: the run each slot count's agreement is counted against:
            ``"floor"`` (the one-at-a-time run of the other seed, as the floor compares
            two seeds) when the floor was measured, else ``"one_at_a_time"``.
        noise: the load average, CPU time against wall time and the spread of the
            rounds, with the warnings they give (:class:`~llamabatch.measure.noise.Noise`).
        recommendation: what to run: the verdict, its reason and, when it cannot
            tell, what would.
        rounds: every round, with every run and every reply.
        seconds: wall seconds of the whole run (warm-ups included).
        notes: remarks on the run (e.g. fewer items per round than slots).
    """

    model: str | None
    n_prompts: int
    items_per_round: int
    n_rounds: int
    slots: tuple[int, ...]
    sampling: dict[str, Any]
    max_tokens: int
    label_rule: str | None
    label_regex: str | None
    items_seed: int
    min_gain_pct: float
    max_agreement_drop: float
    one_at_a_time: SettingReport
    settings: tuple[SettingReport, ...]
    floor: Floor
    agreement_against: str
    noise: Noise
    recommendation: Recommendation
    rounds: tuple[Round, ...]
    seconds: float
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (``"schema"`` first; infinities as ``None``)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["rounds"] = [_round_json(r) for r in self.rounds]
        return {"schema": TUNE_SCHEMA, **json_ready(fields)}

    def format(self) -> str:
        """The report as text: a table per setting, the floor and the recommendation."""
        return format_report(self)


def _round_json(r: Round) -> dict[str, Any]:
    """A round: its items' ids, the order the settings ran in, and every run's replies."""
    runs = []
    for p in r.passes:
        got = p.result
        runs.append(
            {
                "setting": p.path,
                "slots": setting_slots(p.path),
                "seconds": p.seconds,
                "replies": [] if got is None else list(got.replies),
                "error": p.error,
                "items_batched": 0 if got is None else got.items_batched,
                "items_alone": 0 if got is None else got.items_alone,
                "batch_disabled_reason": None if got is None else got.batch_disabled_reason,
            }
        )
    ids = [it.id for it in r.passes[0].items] if r.passes else []
    return {"index": r.index, "item_ids": ids, "order": list(r.order), "runs": runs}


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _range(iv: Interval) -> str:
    return f"{iv.low:.3f}-{iv.high:.3f}"


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, s = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{s:02d}s"


def format_report(report: TuneReport) -> str:
    """See :meth:`TuneReport.format`."""
    head = (
        "setting",
        "s/item",
        "min",
        "max",
        "CPU s/item",
        "ratio",
        "95 % interval",
        "faster",
        "items/h",
        "ETA all",
        "KV MiB/slot",
        "KV MiB",
        "exact",
        "label",
        "batched",
    )
    rows = [head]
    for s in (report.one_at_a_time, *report.settings):
        n = s.items_batched + s.items_alone
        rows.append(
            (
                s.setting,
                _num(s.s_per_item_median, ".3f"),
                _num(s.s_per_item_min, ".3f"),
                _num(s.s_per_item_max, ".3f"),
                _num(s.cpu_s_per_item_median, ".3f"),
                _num(s.ratio_median, ".3f"),
                "-" if s.ratio_interval is None else _range(s.ratio_interval),
                "-" if s.faster_pct is None else f"{s.faster_pct:+.0f} %",
                _num(s.items_per_hour, ".0f"),
                _eta(s.eta_s),
                _num(s.kv_mib_per_slot, ".1f"),
                _num(s.kv_mib_total, ".1f"),
                "-" if s.exact_share is None else f"{s.exact_share:.0f} %",
                "-" if s.label_share is None else f"{s.label_share:.0f} %",
                "-" if s.slots == 1 else f"{s.items_batched}/{n}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        f"llamabatch tune: {report.model or 'model'}; {report.n_rounds} rounds of "
        f"{report.items_per_round} items (of {report.n_prompts}), max_tokens "
        f"{report.max_tokens}, temperature {report.sampling.get('temperature')}, "
        f"labels: {report.label_rule or 'none'}",
    ]
    for k, r in enumerate(rows):
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for s in report.settings:
        if not s.usable:
            lines.append(f"{s.setting} is not usable: {s.unusable_reason}")
    f = report.floor
    share = f.label_share if f.label_share is not None else f.exact_share
    lines.append(f"floor: {_num(share, '.0f')} % agreement ({f.note})")
    if report.agreement_against == FLOOR and f.seeds is not None:
        lines.append(
            f"agreement of each slot count: its replies (seed {f.seeds[0]}) against one at "
            f"a time with seed {f.seeds[1]}, like the floor"
        )
    lines.extend(f"note: {n}" for n in report.notes)
    lines.extend(f"warning: {w}" for w in report.noise.warnings)
    lines.append(report.recommendation.message)
    lines.append(report.recommendation.command)
    return "\n".join(lines)


# -- bench --------------------------------------------------------------------------------


def document(
    header: Mapping[str, Any],
    params: Mapping[str, Any],
    raw: Sequence[RawRow] | None,
    workload: Mapping[str, Any] | None,
    wall_s: float,
) -> dict[str, Any]:
    """The whole JSON document of ``llamabatch bench`` (fields in docs/bench.md), JSON-ready."""
    return json_ready(
        {
            "schema": BENCH_SCHEMA,
            "header": dict(header),
            "params": dict(params),
            "raw": None
            if raw is None
            else {"columns": list(RAW_COLUMNS), "rows": [r.to_json() for r in raw]},
            "workload": None if workload is None else dict(workload),
            "wall_s": wall_s,
        }
    )


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
