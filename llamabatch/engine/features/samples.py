"""``SamplingParams(n=K)``: K replies of one prompt, a fan-out in front of the scheduler.

:func:`expand` turns a request with ``n == K`` into K plain requests of the same index
and group: request ``j`` has ``sample == j``, ``n == 1`` and seed ``seed + j`` (all
``None`` when ``seed`` is), so a run with a seed is reproducible. The engine runs them as
any items: the later ones copy the prompt's cache from the first one's slot, as any
prompt sharing a prefix with another slot (``min_copy_tokens``). :class:`SampleGroups`
gives the K completions back as one :class:`~llamabatch.completion.Completion`: reply 0's
fields, ``samples`` with all K and, with ``choices``, the ``votes`` for each label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ...completion import Completion, Sample
from ..request import Request


class SampleGroups:
    """The prompts with ``n > 1`` on their way (one group of ``n`` samples each), and their
    replies so far."""

    def __init__(self) -> None:
        self._groups: dict[int, tuple[Request, list[Completion | None]]] = {}

    def expand(self, req: Request) -> list[Request]:
        """``[req]``, or its ``n`` replies' requests when ``req.sampling.n > 1`` (a request
        that is already an error stays one)."""
        sampling = req.sampling
        if sampling.n == 1 or req.error is not None:
            return [req]
        self._groups[req.index] = (req, [None] * sampling.n)
        seed = sampling.seed
        return [
            Request(
                req.index,
                req.prompt,
                dataclasses.replace(sampling, n=1, seed=None if seed is None else seed + j),
                prompt_text=req.prompt_text,
                sample=j,
                group=req.index,
            )
            for j in range(sampling.n)
        ]

    def merge(self, done: Iterable[Request]) -> list[Completion]:
        """The completions of ``done``; the replies of a group are replaced by the group's
        completion once all are there (in the place of the last one)."""
        out = []
        for req in done:
            c = req.result()
            group = self._groups.get(req.index) if req.group is not None else None
            if group is None:
                out.append(c)
                continue
            first, replies = group
            replies[req.sample] = c
            if all(r is not None for r in replies):
                del self._groups[req.index]
                out.append(combine(first, [r for r in replies if r is not None]))
        return out


def combine(first: Request, replies: list[Completion]) -> Completion:
    """One completion of an item from its replies (reply 0 first)."""
    c0 = replies[0]
    samples = tuple(
        Sample(c.text, c.token_ids, c.finish_reason, c.error, c.logprobs) for c in replies
    )
    votes = None
    choices = first.sampling.choices
    if choices is not None:
        votes = {label: 0 for label in dict.fromkeys(choices)}
        for c in replies:
            if c.ok and c.text in votes:
                votes[c.text] += 1
    path = c0.path if all(c.path == c0.path for c in replies) else "alone"
    return dataclasses.replace(c0, samples=samples, votes=votes, path=path)
