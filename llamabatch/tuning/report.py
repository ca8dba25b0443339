"""The result of a tune run: :class:`TuneReport`, its JSON document and its table."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..measure.compare import FLOOR, slots_of
from ..measure.noise import Noise
from ..measure.rounds import Round
from ..measure.stats import Interval
from ..measure.summary import Floor, SettingReport
from .rule import Recommendation

#: ``"schema"`` of the JSON document.
SCHEMA = "llamabatch.tune/1"


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
        return {"schema": SCHEMA, **_clean(fields)}

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
                "slots": slots_of(p.path),
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


def _clean(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _clean(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
