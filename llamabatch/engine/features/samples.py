"""``SamplingParams(n=K)``: K replies of one prompt, from one prefill.

Pure Python. The scheduler turns an item with ``n == K`` into K items of the same index
(:meth:`SampleGroups.expand`): item ``j`` has ``sample == j``, ``n == 1`` and seed
``seed + j`` (every one ``None`` when ``seed`` is: each then draws its own random seed),
so a run with a seed is reproducible. In the slot engine the first one prefills the
prompt; the others placed while it still prefills wait, sample their first token from
its last prompt row in the same decode (``Span.share``) and copy its cache then
(:meth:`~llamabatch.engine.slot_engine.SlotEngine.place`), so the prompt is prefilled
once (``Stats.prompt_shares`` counts the replies that shared it). Replies placed later,
or completed alone, reuse the cached prompt as any item does.

:meth:`SampleGroups.merge` gives the K completions back as one
:class:`~llamabatch.completion.Completion`: reply 0's fields, ``samples`` with all K,
and with ``choices`` the ``votes`` for each label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ...completion import Completion, Sample
from ..items import Item


class SampleGroups:
    """The items of the prompts with ``n > 1`` on their way, and their replies so far."""

    def __init__(self) -> None:
        self._groups: dict[int, tuple[Item, list[Completion | None]]] = {}
        self._pending: dict[int, tuple[int, int]] = {}  # id(completion) -> (index, j)

    def expand(self, item: Item) -> list[Item]:
        """``[item]``, or its ``n`` replies' items when ``item.sampling.n > 1`` (an item
        whose prompt is an error stays one item)."""
        sampling = item.sampling
        if sampling.n == 1 or item.error is not None:
            return [item]
        self._groups[item.index] = (item, [None] * sampling.n)
        seed = sampling.seed
        return [
            dataclasses.replace(
                item,
                sampling=dataclasses.replace(
                    sampling, n=1, seed=None if seed is None else seed + j
                ),
                sample=j,
            )
            for j in range(sampling.n)
        ]

    def note(self, item: Item, completion: Completion) -> Completion:
        """Remember which reply ``completion`` is when ``item`` is one of a group."""
        if item.index in self._groups:
            self._pending[id(completion)] = (item.index, item.sample)
        return completion

    def merge(self, done: Iterable[Completion]) -> list[Completion]:
        """``done`` with the replies of each group replaced by the group's completion
        once all of its replies are there (in the place of the last one)."""
        out = []
        for c in done:
            where = self._pending.pop(id(c), None)
            if where is None:
                out.append(c)
                continue
            index, j = where
            item, replies = self._groups[index]
            replies[j] = c
            if all(r is not None for r in replies):
                del self._groups[index]
                out.append(combine(item, [r for r in replies if r is not None]))
        return out


def combine(item: Item, replies: list[Completion]) -> Completion:
    """One completion of ``item`` from its replies (reply 0 first)."""
    first = replies[0]
    samples = tuple(
        Sample(c.text, c.token_ids, c.finish_reason, c.error, c.logprobs) for c in replies
    )
    votes = None
    choices = item.sampling.choices
    if choices is not None:
        votes = {label: 0 for label in dict.fromkeys(choices)}
        for c in replies:
            if c.ok and c.text in votes:
                votes[c.text] += 1
    path = first.path if all(c.path == first.path for c in replies) else "alone"
    return dataclasses.replace(first, samples=samples, votes=votes, path=path)
