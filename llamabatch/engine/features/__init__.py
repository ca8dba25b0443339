"""Features around the slot engine: each turns requests into other requests before the
scheduler and merges what they become after it, so the engine needs no branch for them.

- :mod:`.samples`: ``SamplingParams(n=K)``, K replies of one prompt as K items;
- :mod:`.labels`: ``score_choices``, the log-probability of every label.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...completion import Completion
from ..backend import BackendInfo, Vocab
from ..request import Request
from .label_tokens import TailTokens
from .labels import label_request
from .samples import SampleGroups


class Features:
    """The features, in order, for one scheduler.

    Args:
        vocab: the backend's vocabulary (labels are tokenized with it).
        info: what the backend can do (``min_score_run``).
    """

    def __init__(self, vocab: Vocab, info: BackendInfo) -> None:
        self._tokenize = vocab.tokenize
        self._tails = TailTokens(vocab.tokenize)  # label tokens per prompt end
        self._min_run = info.min_score_run
        self.samples = SampleGroups()

    def expand(self, req: Request) -> list[Request]:
        """The requests that run for ``req`` (the scheduler sends only those with ``n`` > 1
        or scores here); a plain one is ``[req]``."""
        reqs = self.samples.expand(req)
        return [label_request(r, self._tokenize, self._tails, self._min_run) for r in reqs]

    def merge(self, done: Iterable[Request]) -> list[Completion]:
        """The completions of finished requests (a group's once all of it is done; the
        scheduler sends only steps that end a reply of ``n`` > 1)."""
        return self.samples.merge(done)
