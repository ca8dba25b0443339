"""What a written label adds after a prompt, from the prompt's last characters.

:func:`~llamabatch.engine.features.labels.continuations` tokenizes ``prompt + label`` for every
written form of every label; a tagger's prompts end alike (the item, then a fixed
instruction such as ``"...\\nCategory:"``), so :class:`TailTokens` tokenizes only the
prompt's last :data:`TAIL_CHARS` characters with each form and keeps the answer per
(tail, form). Tokenizers merge only within the last words of the prompt, so the tail's
tokens after its first few equal the prompt's own; an answer is used only where the
tail's last tokens (the ones the label merges with, and :data:`GUARD` more) are the
prompt's last tokens, else the whole prompt is tokenized again.

That tokenizers merge only near the end is an assumption, checked for byte-pair and
SentencePiece vocabularies (SmolLM2's, and 14 of llama.cpp's test vocabularies on random
and adversarial texts: no difference). A unigram tokenizer that adds float piece scores
(llama.cpp's UGM, T5-style) can break a tie between two segmentations otherwise when
the text before the tail is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..cache import common_prefix

#: Characters of the prompt's end tokenized with each label.
TAIL_CHARS = 64
#: Tokens before those a label merges with that must also be the prompt's own.
GUARD = 4


class TailTokens:
    """The tokens each written label adds after a prompt's text, kept per (tail, form).

    Args:
        tokenize: the backend's ``tokenize`` (special tokens parsed, BOS as the model
            wants).
        max_entries: answers kept; all are dropped once there are more.
    """

    def __init__(self, tokenize: Callable[[str], list[int]], max_entries: int = 4096) -> None:
        self._tokenize = tokenize
        self._max = max_entries
        self._memo: dict[tuple[str, str], tuple[int, tuple[int, ...], tuple[int, ...]]] = {}

    def after(
        self, prompt: Sequence[int], text: str, written: str
    ) -> tuple[int, tuple[int, ...]] | None:
        """``(n_keep, tokens)``: ``written`` after ``text`` is ``tokens`` after the
        prompt's first ``n_keep`` tokens, as ``tokenize(text + written)`` gives; ``None``
        where the tail cannot tell (a short prompt, a tail whose tokens are not the
        prompt's last ones, a label adding no token): tokenize the whole then.

        Raises:
            BackendError: from ``tokenize``.
        """
        if len(text) <= TAIL_CHARS:
            return None
        key = (text[-TAIL_CHARS:], written)
        hit = self._memo.get(key)
        if hit is None:
            tail = self._tokenize(key[0])
            full = self._tokenize(key[0] + written)
            k = common_prefix(full, tail)
            merged = len(tail) - k  # the prompt's last tokens the label merges with
            n_check = merged + GUARD
            ok = len(tail) >= n_check + 2  # and two more: the cut start (and a BOS)
            hit = (merged, tuple(full[k:]), tuple(tail[-n_check:]) if ok else ())
            if len(self._memo) >= self._max:
                self._memo.clear()
            self._memo[key] = hit
        merged, tokens, check = hit
        if not check or not tokens or len(prompt) <= len(check):
            return None
        if tuple(prompt[-len(check) :]) != check:
            return None
        return len(prompt) - merged, tokens
