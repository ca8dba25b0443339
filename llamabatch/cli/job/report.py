"""What ``llamabatch complete`` says on stderr: the progress bar and the summary line."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import IO, Any

from ...completion import Completion


@dataclass(slots=True)
class JobTally:
    """Counts of the records written by this run, for the progress bar and the summary.

    Attributes:
        items: records written (completions and bad lines).
        errors: records whose ``finish_reason`` is ``"error"`` (bad lines included).
        bad: bad input lines written as errors (``--skip-bad``).
        completed: items that went through the model.
        alone: of those, items completed one at a time.
        tokens_in, tokens_out: prompt and generated tokens (of every reply with ``n``).
    """

    items: int = 0
    errors: int = 0
    bad: int = 0
    completed: int = 0
    alone: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, completion: Completion) -> None:
        self.items += 1
        self.completed += 1
        self.errors += completion.finish_reason == "error"
        self.alone += completion.path == "alone"
        self.tokens_in += completion.n_prompt_tokens
        self.tokens_out += completion.completion_tokens

    def add_bad(self) -> None:
        self.items += 1
        self.errors += 1
        self.bad += 1

    @property
    def alone_share(self) -> str:
        """Share of the items that went through the model that were completed alone."""
        return f"{100 * self.alone // max(self.completed, 1)}%"


def batching_note(slots: int, stats: Any) -> str:
    """Say whether batching was on, and why not when it was off."""
    if slots == 1:
        return "batching off (--slots 1)"
    reason = getattr(stats, "batch_disabled_reason", None) if stats is not None else None
    if reason:
        return f"batching off: {reason}"
    n = getattr(stats, "items_batched", 0) if stats is not None else 0
    return f"batching on ({slots} slots, {n} items batched)"


def summary_line(
    tally: JobTally,
    total: int,
    wall_s: float,
    gen_s: float,
    note: str,
    skipped: int = 0,
    where: str = "the output",
) -> str:
    """The one-line summary printed on stderr at the end of a job.

    Args:
        tally: what this run wrote.
        total: records this run had to write (input items not already done).
        wall_s, gen_s: seconds of the whole run and of generation.
        note: the last part (batching on or off, or why nothing was done).
        skipped: input items skipped as already in the output (``--resume``).
        where: the output's name.
    """
    rate = tally.tokens_out / gen_s if gen_s > 0 else 0.0
    done = f"{tally.items} items" if tally.items == total else f"{tally.items} of {total} items"
    bad = f" ({tally.bad} bad input lines)" if tally.bad else ""
    skip = f", {skipped} skipped as already done in {where}" if skipped else ""
    return (
        f"llamabatch: {done}, {tally.errors} errors{bad}, {tally.alone} completed "
        f"alone{skip}; tokens in {tally.tokens_in}, out {tally.tokens_out}; wall "
        f"{wall_s:.1f} s (generation {gen_s:.1f} s), {rate:.1f} tokens/s out; {note}"
    )


def progress_bar(
    total: int,
    quiet: bool,
    *,
    desc: str = "complete",
    unit: str = "item",
    file: IO[str] | None = None,
    leave: bool = True,
) -> Any:
    """A tqdm bar on ``file`` (default: stderr): units done/total, units/s, ETA; no bar
    when ``quiet``. ``complete`` sets ``alone=`` (share of the items completed alone);
    ``bench`` uses it for its runs and items (``leave=False``: gone when done)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit=unit,
        file=sys.stderr if file is None else file,
        disable=quiet,
        dynamic_ncols=True,
        desc=desc,
        leave=leave,
    )
