"""Label scores: log P(label | prompt) for every label of ``SamplingParams(choices=...,
score_choices=True)`` from one prefill of the prompt (:class:`LabelRequest`); the prompt's
own tokens with ``score_prompt``; whether a continuation is the greedy one from
``SeqOutput.row_max``. The token rule, the score, the skipped forms and how the runs share
rows are in docs/engine.md ("Label scores"); the reference is ``Llama(logits_all=True)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from ...completion import Completion
from ...errors import LlamaBatchError
from ..cache import common_prefix
from ..request import Request, RequestStatus, Run
from ..step import SeqOutput, Span, Targets
from .label_tokens import TailTokens

#: The most a label's log-probability may lack (nats) for the forms left unfinished: a
#: form with rows still to score has at most the sum ``u`` of its rows so far (each
#: further row adds a log-softmax <= 0), so leaving out forms ``s`` lowers a label whose
#: finished forms sum to ``a`` by at most ``log1p(sum_s exp(u_s - a))``; a form is left
#: out only while that stays <= SKIP_NATS (docs/labels.md says why 0.02).
SKIP_NATS = 0.02

#: A row of a path: (its position, the path's tokens from the first shared position up
#: to and including it).
RowKey = tuple[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Continuation:
    """One way of writing a label after the prompt.

    Attributes:
        label: the label it counts for.
        written: the text scored (the label, or the label with a leading space).
        n_keep: prompt tokens it follows (< the prompt's length where they merge).
        tokens: its token ids after ``prompt[:n_keep]``, at least one.
        likely: the form a writer would use after this prompt (decoded first): the
            spaced one unless the prompt's text ends in whitespace; a label's only form.
    """

    label: str
    written: str
    n_keep: int
    tokens: tuple[int, ...]
    likely: bool = True


def forms(labels: Sequence[str], leading_space: bool) -> list[tuple[str, str]]:
    """``(label, written)`` pairs: each label (duplicates dropped) as written, then with
    one leading space when ``leading_space`` and that form is neither the label itself
    nor another label."""
    unique = list(dict.fromkeys(labels))
    taken = set(unique)
    out = []
    for label in unique:
        out.append((label, label))
        spaced = " " + label
        if leading_space and not label.startswith(" ") and spaced not in taken:
            out.append((label, spaced))
    return out


def continuations(
    prompt: Sequence[int],
    text: str | None,
    labels: Sequence[str],
    leading_space: bool,
    tokenize: Callable[[str], list[int]],
    tails: TailTokens | None = None,
) -> list[Continuation]:
    """The continuations to score for ``labels`` after ``prompt`` (see the module doc).

    Args:
        text: the prompt's text, or ``None`` when it was given as token ids.
        leading_space: also score each label with one leading space.
        tokenize: the backend's ``tokenize``.
        tails: answers kept from the prompts' ends (same ``tokenize``).

    Raises:
        ValueError: a label adds no token after the prompt, or merges with the whole
            prompt (it shares no token with it).
    """
    out = []
    base: list[int] | None = None
    pairs = forms(labels, leading_space)
    n_forms = {label: sum(1 for lab, _ in pairs if lab == label) for label, _ in pairs}
    ends_in_space = text is not None and text[-1:].isspace()
    for label, written in pairs:
        found = None if text is None or tails is None else tails.after(prompt, text, written)
        if found is not None:
            k, tail_tokens = found
            full = list(prompt[:k]) + list(tail_tokens)
        elif text is not None:
            full = tokenize(text + written)
            k = common_prefix(full, prompt)
            if k == 0:
                raise ValueError(
                    f"label {written!r} merges with the prompt's first token: "
                    "no token boundary of the prompt is left to score it from"
                )
        else:
            if base is None:
                base = tokenize("")
            full = tokenize(written)
            full = full[common_prefix(full, base) :]
            full, k = list(prompt) + full, len(prompt)
        tokens = tuple(full[k:])
        if not tokens:
            raise ValueError(f"label {written!r} adds no token after the prompt")
        likely = n_forms[label] == 1 or (written != label) != ends_in_space
        out.append(Continuation(label, written, k, tokens, likely))
    return out


def logsumexp(values: Sequence[float]) -> float:
    """``log(sum(exp(v)))``, stable; ``-inf`` for no values."""
    if not values:
        return -math.inf
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


class LabelRequest(Request):
    """A request that scores its labels instead of sampling a reply.

    Args:
        base: the item's request (prompt, sampling, index).
        conts: its continuations (:func:`continuations`), at least one.
        min_run: fewest tokens decoded in a call that scores a row
            (``BackendInfo.min_score_run``).
    """

    precise = True
    too_long = ("n_prompt_tokens + label tokens > n_ctx_seq", "shorten the labels")

    def __init__(self, base: Request, conts: list[Continuation], min_run: int) -> None:
        if not conts:
            raise ValueError("a LabelRequest needs at least one continuation")
        self.conts, self.min_run = conts, min_run
        self._k_min = min(c.n_keep for c in conts)
        super().__init__(base.index, base.prompt, base.sampling, prompt_text=base.prompt_text)
        self._paths = [tuple(self.prompt[: c.n_keep]) + c.tokens for c in conts]
        self._wanted: dict[RowKey, set[int]] = {}
        for path, cont in zip(self._paths, conts):
            for j, target in self._rows(path, cont):
                self._wanted.setdefault(self._key(path, j), set()).add(target)

    def reset(self) -> None:
        super().reset()
        self._got: dict[tuple[RowKey, int], float] = {}
        self._top: dict[RowKey, float | None] = {}
        self._skipped: set[int] = set()
        self._alone: tuple[tuple[int, ...], Targets] | None = None

    # -- its size, its runs, its outputs -----------------------------------------------
    def need(self) -> int:
        """The prompt tokens its longest label keeps, and that label's tokens."""
        return max(len(p) for p in self._paths)

    def too_long_for(self, n_ctx: int) -> str:
        c = max(self.conts, key=lambda c: c.n_keep + len(c.tokens))
        return (
            f"cannot score the labels: label {c.written!r} is {len(c.tokens)} tokens after "
            f"{c.n_keep} prompt tokens, {c.n_keep + len(c.tokens)} in all; the model context "
            f"holds n_ctx={n_ctx}: shorten the label or the prompt, or load the model with a "
            "larger n_ctx"
        )

    def first_run(self, checkpoints: bool) -> Run:
        """The prompt, with the first continuation folded in where no checkpoint is
        needed (:meth:`fold`); it keeps at most the cached tokens before the first row
        a continuation needs, and decodes ``min_run`` tokens at least."""
        goal = self.prompt if checkpoints else self.fold()
        folded = len(goal) - len(self.prompt)
        keep = min(self._k_min - 1, max(0, len(self.prompt) - max(1, self.min_run - folded)))
        return Run(goal, keep, samples=False, rows=self.targets)

    def take(self, out: SeqOutput, span: Span | None, cached: Sequence[int]) -> None:
        if out.error is not None:
            self.fail(out.error)
            return
        if span is None and self._alone is not None:
            path, targets = self._alone
            span, cached = Span(-1, 0, path, targets=targets), ()
        if span is None or span.targets is None or out.scores is None:
            return
        self.record(cached, span.pos, span.tokens, span.targets, out.scores, out.row_max)

    def alone_job(self) -> tuple[Sequence[int], None, Targets] | None:
        if self.finished:
            return None
        found = self.next_path()
        if found is None:
            self.status = RequestStatus.FINISHED
            return None
        self._alone = found
        return list(found[0]), None, found[1]

    def result(self) -> Completion:
        if self.error is not None:
            return super().result()
        n_prompt = len(self.prompt)
        try:
            if self.sampling.score_prompt:
                logprobs = self.row_scores(0)
                return Completion(
                    self.index, "", (), "stop", None, n_prompt, self.path,
                    prompt_logprobs=logprobs,
                )  # fmt: skip
            scores = self.label_scores()
        except KeyError:
            self.error = "scoring ended before every row was scored"
            return super().result()
        return Completion(
            self.index, scores.label, scores.tokens, "stop", None, n_prompt, self.path,
            choice_logprobs=scores.logprobs, choice_probs=scores.probs,
            choice_greedy=scores.greedy,
        )  # fmt: skip

    # -- rows --------------------------------------------------------------------------
    @staticmethod
    def _rows(path: Sequence[int], cont: Continuation) -> list[tuple[int, int]]:
        """``(row, target)`` pairs scoring the continuation."""
        return [(j, path[j + 1]) for j in range(cont.n_keep - 1, len(path) - 1)]

    def _key(self, path: Sequence[int], j: int) -> RowKey:
        return (j, tuple(path[self._k_min : j + 1]))

    def targets(
        self, cached: Sequence[int], pos: int, tokens: Sequence[int]
    ) -> tuple[tuple[int, ...], ...] | None:
        """``Span.targets`` of the span ``pos``, ``tokens`` after ``cached``: one tuple
        per token, or ``None`` when no row wants anything."""
        first = max(pos, self._k_min - 1)
        if first >= pos + len(tokens):
            return None
        path = list(cached[:pos]) + list(tokens)
        out: list[tuple[int, ...]] = [()] * len(tokens)
        for j in range(first, pos + len(tokens)):
            key = self._key(path, j)
            wanted = self._wanted.get(key)
            if wanted:
                out[j - pos] = tuple(sorted(t for t in wanted if (key, t) not in self._got))
        return tuple(out) if any(out) else None

    def record(
        self,
        cached: Sequence[int],
        pos: int,
        tokens: Sequence[int],
        targets: Sequence[Sequence[int]],
        scores: Sequence[Sequence[float]],
        row_max: Sequence[float | None] | None = None,
    ) -> None:
        """Keep a span's scores (``targets`` as sent) and its rows' maxima.

        Raises:
            ValueError: ``scores`` does not match ``targets`` row for row.
        """
        if len(scores) != len(targets) or any(len(s) != len(t) for s, t in zip(scores, targets)):
            raise ValueError(f"scores {scores!r} do not match targets {targets!r}")
        if row_max is not None and len(row_max) != len(targets):
            raise ValueError(f"row maxima {row_max!r} do not match targets {targets!r}")
        path = list(cached[:pos]) + list(tokens)
        for r, (ids, values) in enumerate(zip(targets, scores)):
            if ids:
                key = self._key(path, pos + r)
                for t, v in zip(ids, values):
                    self._got[(key, t)] = float(v)
                top = None if row_max is None else row_max[r]
                self._top[key] = None if top is None else float(top)

    # -- forms left unfinished (SKIP_NATS) ---------------------------------------------
    def _finished(self, i: int) -> bool:
        path, cont = self._paths[i], self.conts[i]
        return all((self._key(path, j), t) in self._got for j, t in self._rows(path, cont))

    def _bound(self, i: int) -> float:
        """The most continuation ``i``'s log-probability can be: its scored rows summed."""
        path, cont = self._paths[i], self.conts[i]
        return sum(self._got.get((self._key(path, j), t), 0.0) for j, t in self._rows(path, cont))

    def _settle(self) -> None:
        """Leave out the forms that cannot move their label by more than :data:`SKIP_NATS`."""
        for label in dict.fromkeys(c.label for c in self.conts):
            mine = [i for i, c in enumerate(self.conts) if c.label == label]
            done = [i for i in mine if self._finished(i)]
            if not done or len(done) == len(mine):
                continue
            a = logsumexp([self.continuation_logprob(i) for i in done])
            left = [i for i in mine if i not in done]
            mass = sum(math.exp(self._bound(i) - a) for i in left if i in self._skipped)
            for i in sorted((i for i in left if i not in self._skipped), key=self._bound):
                m = math.exp(self._bound(i) - a)
                if math.log1p(mass + m) > SKIP_NATS:
                    break
                self._skipped.add(i)
                mass += m

    def _open(self) -> list[int]:
        """The continuations still to finish, the highest bound (then likely) first."""
        self._settle()
        left = [i for i in range(len(self.conts)) if i not in self._skipped]
        return sorted((i for i in left if not self._finished(i)), key=self._rank, reverse=True)

    def _rank(self, i: int) -> tuple[float, bool]:
        return (self._bound(i), self.conts[i].likely)

    # -- runs --------------------------------------------------------------------------
    def fold(self) -> list[int]:
        """The first run folded into the prompt's prefill: the prompt and the longest
        likely path that keeps all of it (its last token left out), so that one decode
        scores those rows too. Only where the cache can be cut back (a checkpoint must
        hold the prompt alone)."""
        n = len(self.prompt)
        longest: tuple[int, ...] = ()
        for path, cont in zip(self._paths, self.conts):
            if cont.likely and cont.n_keep == n and len(path) - 1 - n > len(longest):
                longest = path[n:-1]
        return list(self.prompt) + list(longest)

    def next_run(self, cached: Sequence[int], checkpointed: bool) -> Run | None:
        """The likeliest continuation still to finish (among equals, the one keeping the
        most of ``cached``) as the next run, or ``None`` when done: it keeps the cached
        tokens before its first row not scored yet, and decodes ``min_run`` tokens at
        least (1 from a checkpoint)."""
        min_run = 1 if checkpointed else self.min_run
        best: tuple[tuple[float, bool], int] | None = None  # (rank, keep) of the chosen one
        chosen = -1
        for i in self._open():
            path, cont = self._paths[i], self.conts[i]
            missing = [
                j for j, t in self._rows(path, cont) if (self._key(path, j), t) not in self._got
            ]
            keep = min(common_prefix(cached, path), missing[0], max(0, len(path) - 1 - min_run))
            key = (self._rank(i), keep)
            if best is None or key > best:
                best, chosen = key, i
        if best is None:
            return None
        return Run(self._paths[chosen][:-1], best[1], samples=False, rows=self.targets)

    def next_path(self) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]] | None:
        """The likeliest continuation still to finish (its path less the last token, and
        its targets) for ``Backend.run_alone``, or ``None`` when done."""
        left = self._open()
        if not left:
            return None
        path = self._paths[left[0]][:-1]
        targets = self.targets((), 0, path)
        if targets is None:  # cannot happen: an open continuation has a row to score
            raise ValueError(f"continuation {self.conts[left[0]]!r} has no row left")
        return path, targets

    # -- the result --------------------------------------------------------------------
    def row_scores(self, i: int) -> tuple[float, ...]:
        """The log-softmax of each token of continuation ``i`` at its row.

        Raises:
            KeyError: a row is not scored yet.
        """
        path, cont = self._paths[i], self.conts[i]
        return tuple(self._got[(self._key(path, j), t)] for j, t in self._rows(path, cont))

    def continuation_logprob(self, i: int) -> float:
        """log P(continuation ``i`` | ``prompt[:n_keep]``): its rows' scores summed.

        Raises:
            KeyError: a row is not scored yet.
        """
        return sum(self.row_scores(i))

    def is_greedy(self, i: int) -> bool | None:
        """Whether each token of continuation ``i`` is its row's likeliest (its score is the
        row's maximum); ``None`` when a row's maximum is unknown.

        Raises:
            KeyError: a row is not scored yet.
        """
        path, cont = self._paths[i], self.conts[i]
        greedy = True
        for j, t in self._rows(path, cont):
            key = self._key(path, j)
            top = self._top.get(key)
            if top is None:
                return None
            greedy = greedy and self._got[(key, t)] >= top
        return greedy

    def label_scores(self) -> LabelScores:
        """Every label's log-probability and probability, and the winner.

        Raises:
            KeyError: a row is not scored yet.
        """
        self._settle()
        by_label: dict[str, list[float]] = {}
        best: dict[str, tuple[float, int]] = {}
        for i, cont in enumerate(self.conts):
            if i in self._skipped and not self._finished(i):
                continue
            lp = self.continuation_logprob(i)
            by_label.setdefault(cont.label, []).append(lp)
            if cont.label not in best or lp > best[cont.label][0]:
                best[cont.label] = (lp, i)
        logprobs = {label: logsumexp(v) for label, v in by_label.items()}
        z = logsumexp(list(logprobs.values()))
        probs = {
            label: (math.exp(lp - z) if z > -math.inf else 1.0 / len(logprobs))
            for label, lp in logprobs.items()
        }
        winner = max(logprobs, key=lambda label: (probs[label], -list(logprobs).index(label)))
        tokens = self.conts[best[winner][1]].tokens
        flags = {label: self.is_greedy(i) for label, (_, i) in best.items()}
        greedy = None if None in flags.values() else cast(dict[str, bool], flags)
        return LabelScores(logprobs, probs, winner, tokens, greedy)


@dataclass(frozen=True, slots=True)
class LabelScores:
    """What a :class:`LabelRequest` found.

    Attributes:
        logprobs: label -> log P(label | prompt), nats, in the order of the labels.
        probs: label -> the same normalised over the labels (sum 1).
        label: the likeliest label (the first of equal ones).
        tokens: the tokens of its likeliest written form after the prompt.
        greedy: label -> whether its likeliest written form is the greedy continuation
            (:meth:`LabelRequest.is_greedy`), in the order of the labels; ``None`` when
            the backend reports no row maxima.
    """

    logprobs: dict[str, float]
    probs: dict[str, float]
    label: str
    tokens: tuple[int, ...]
    greedy: dict[str, bool] | None = None


def label_request(
    req: Request, tokenize: Callable[[str], list[int]], tails: TailTokens, min_run: int
) -> Request:
    """``req`` as a :class:`LabelRequest` when it scores labels or its prompt, else ``req``;
    labels that cannot be scored are its error."""
    sampling = req.sampling
    if req.error is None and sampling.score_prompt:
        if len(req.prompt) < 2:
            return _failed(
                req,
                "score_prompt needs a prompt of at least 2 tokens: the first token has no "
                "context to be scored after",
            )
        return LabelRequest(req, [Continuation("", "", 1, tuple(req.prompt[1:]))], min_run)
    if req.error is not None or sampling.choices is None or not sampling.scores_labels:
        return req
    try:
        conts = continuations(
            req.prompt,
            req.prompt_text,
            sampling.choices,
            sampling.choice_leading_space,
            tokenize,
            tails,
        )
    except (ValueError, LlamaBatchError) as exc:
        return _failed(req, f"cannot score the labels: {exc}")
    return LabelRequest(req, conts, min_run)


def _failed(req: Request, message: str) -> Request:
    """``req`` ended with ``message`` for good (a retry alone resets only its own errors)."""
    return Request(req.index, req.prompt, req.sampling, prompt_text=req.prompt_text, error=message)
