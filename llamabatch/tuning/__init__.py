"""Which slot count pays on the user's own device, model and items, and whether the
replies still agree: :func:`tune` runs one at a time against the slot engine at each
slot count and returns a :class:`TuneReport` (what ``llamabatch tune`` prints and writes).

The rounds, the paths, the summaries, the intervals, the noise figures and the agreement
are :mod:`llamabatch.measure`'s (what ``llamabatch bench`` measures with too); here:
``run`` (:func:`tune`), ``rule`` (the verdict: use K slots, does not pay, cannot tell),
``report`` (:class:`TuneReport`, its JSON and table), ``plot``
(the PNG, needs matplotlib: ``pip install 'llamabatch[plot]'``).
"""

from ..measure.agreement import Agreement
from ..measure.summary import Floor, SettingReport, floor_of, summarize
from .report import TuneReport
from .rule import Recommendation, recommend
from .run import tune

__all__ = [
    "Agreement",
    "Floor",
    "Recommendation",
    "SettingReport",
    "TuneReport",
    "floor_of",
    "recommend",
    "summarize",
    "tune",
]
