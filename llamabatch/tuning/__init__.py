"""Which slot count pays on the user's own device, model and items, and whether the
replies still agree: :func:`tune` runs one at a time against the slot engine at each
slot count and returns a :class:`TuneReport` (what ``llamabatch tune`` prints and writes).

Modules, one concept each: ``rounds`` (the disjoint samples of items and the order of
the settings), ``baseline`` (one at a time through ``Llama.create_completion``),
``run`` (:func:`tune`), ``records`` (every reply of every run), ``agreement`` (equal
replies and labels), ``summary`` (per setting over the rounds, and the floor), ``rule``
(the recommendation), ``report`` (:class:`TuneReport`, its JSON and table), ``plot``
(the PNG, needs matplotlib: ``pip install 'llamabatch[plot]'``).
"""

from ..measure.agreement import Agreement
from ..measure.records import RoundRecord, RunRecord, TuneReply
from ..measure.summary import Floor, SettingReport, floor_of, summarize
from .report import TuneReport
from .rule import Recommendation, recommend
from .run import tune

__all__ = [
    "Agreement",
    "Floor",
    "Recommendation",
    "RoundRecord",
    "RunRecord",
    "SettingReport",
    "TuneReply",
    "TuneReport",
    "floor_of",
    "recommend",
    "summarize",
    "tune",
]
