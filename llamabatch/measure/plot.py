"""The PNG of a :class:`~llamabatch.measure.report.TuneReport`: s/item and agreement by slot count.

Left: the median seconds per item of each slot count, a bar from the fastest to the
slowest round, and the one-at-a-time median as a horizontal line (below it: batching
saves time), with the line of the needed gain dashed. Right: agreement with one at a
time (label share when the replies are labels, else exact share), with the floor (two
one-at-a-time runs) as a horizontal line and the lowest agreement allowed dashed.
Settings that were not usable are drawn as crosses at the bottom.

Needs matplotlib (the ``plot`` extra: ``pip install 'llamabatch[plot]'``), imported only
when a plot is made.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import PlotUnavailable
from .report import TuneReport

PLOT_INSTALL = "pip install 'llamabatch[plot]'"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed).

    Raises:
        PlotUnavailable: matplotlib is missing; the message says how to install it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(
            f"the plot needs matplotlib, which is not installed ({exc}); "
            f"install it with: {PLOT_INSTALL}"
        ) from None
    return plt


def plot_report(report: TuneReport, path: str | os.PathLike[str]) -> None:
    """Write the plot of ``report`` to ``path`` (PNG).

    Raises:
        PlotUnavailable: matplotlib is missing (the message names the ``plot`` extra).
        OSError: ``path`` cannot be written.
    """
    plt = pyplot()
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    try:
        ok = [s for s in report.settings if s.usable and s.s_per_item_median is not None]
        bad = [s for s in report.settings if s not in ok]
        xs = [s.slots for s in ok]
        ticks = [s.slots for s in report.settings]
        base = report.one_at_a_time.s_per_item_median
        if ok:
            med = [s.s_per_item_median or 0.0 for s in ok]
            lo = [m - (s.s_per_item_min or m) for m, s in zip(med, ok)]
            hi = [(s.s_per_item_max or m) - m for m, s in zip(med, ok)]
            ax_t.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=4, label="slot engine")
        if base is not None:
            ax_t.axhline(base, color="black", label="one at a time")
            need = base * (1 - report.min_gain_pct / 100)
            ax_t.axhline(
                need, color="gray", linestyle="--", label=f"{report.min_gain_pct:g} % faster"
            )
        if bad:
            ax_t.plot([s.slots for s in bad], [0] * len(bad), "rx", label="not usable")
        ax_t.set_xlabel("slots")
        ax_t.set_ylabel("s/item (median; bar: min-max over rounds)")
        ax_t.set_ylim(bottom=0)
        ax_t.set_title("time per item")
        ax_a.set_title("agreement with one at a time")
        floor = report.floor.agreement_share()
        shares = [s.agreement_share() for s in ok]
        if ok:
            ax_a.plot(xs, shares, marker="o", label="slot engine")
        if floor is not None:
            ax_a.axhline(floor, color="black", label="floor (one at a time twice)")
            ax_a.axhline(
                floor - report.max_agreement_drop,
                color="gray",
                linestyle="--",
                label=f"floor - {report.max_agreement_drop:g} points",
            )
        kind = "label" if report.label_rule else "exact reply"
        ax_a.set_xlabel("slots")
        ax_a.set_ylabel(f"{kind} agreement, %")
        ax_a.set_ylim(0, 105)
        for ax in (ax_t, ax_a):
            if ticks:
                ax.set_xticks(ticks)
            ax.legend(loc="lower left", fontsize="small")
        fig.suptitle(
            f"{report.model or 'model'}: {report.n_rounds} rounds x {report.items_per_round} items"
            f" - {report.recommendation.message}",
            fontsize="small",
        )
        fig.savefig(os.fspath(path), dpi=100)
    finally:
        plt.close(fig)
