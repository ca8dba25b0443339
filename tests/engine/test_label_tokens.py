"""Label tokens from the prompt's end (TailTokens): the same continuations as tokenizing
the whole prompt with each label, and each form tokenized once per prompt end."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch.engine.features.label_tokens import TAIL_CHARS, TailTokens
from llamabatch.engine.features.labels import continuations
from llamabatch.testing import FakeBackend


def merging(text: str) -> list[int]:
    """Bytes after a BOS (1), but " b" is one token (300) and ": b" another (301)."""
    data, out, i = text.encode(), [1], 0
    while i < len(data):
        if data[i : i + 3] == b": b":
            out.append(301)
            i += 3
        elif data[i : i + 2] == b" b":
            out.append(300)
            i += 2
        else:
            out.append(data[i])
            i += 1
    return out


def pairing(text: str) -> list[int]:
    """BOS, then each run of "a" paired from its right end ("aa" = 500, an odd "a" left
    first), ": b" = 301, the rest bytes: a merge that reaches back a whole run."""
    out = [1]
    for m in re.finditer(r"a+|: b|.", text, re.S):
        s = m.group()
        if s[0] == "a":
            if len(s) % 2:
                out.append(97)
            out += [500] * (len(s) // 2)
        elif s == ": b":
            out.append(301)
        else:
            out += list(s.encode())
    return out


def no_bos(text: str) -> list[int]:
    return merging(text)[1:]


@settings(max_examples=400, deadline=None)
@given(
    body=st.text(alphabet="ab :x\n<é日", min_size=TAIL_CHARS, max_size=150),
    end=st.sampled_from(["Category:", "aaaa", "a", ": ", "é", ""]),
    labels=st.lists(
        st.sampled_from(["bug", "b", "a", "aa", " bx", "x", "é", "日"]), min_size=1, max_size=3
    ),
    tokenize=st.sampled_from([merging, pairing, no_bos]),
)
def test_the_tail_gives_what_the_whole_prompt_gives(body, end, labels, tokenize) -> None:
    text = body + end
    prompt = tokenize(text)
    tails = TailTokens(tokenize)

    def conts(t):
        try:
            return continuations(prompt, text, labels, True, tokenize, t)
        except ValueError as exc:
            return str(exc)

    assert conts(tails) == conts(None)
    assert conts(tails) == conts(None)  # from the kept answers too


def test_the_tail_is_used_and_a_merge_reaching_back_is_followed() -> None:
    """A prompt ending in a run of "a": the label "a" re-pairs the whole run, so the
    label's tokens start where the run starts; the tail still answers (the run is
    shorter than the tail) and gives the whole prompt's answer."""
    text = "x" * 80 + " Category: " + "a" * 5
    prompt = pairing(text)
    tails = TailTokens(pairing)
    found = tails.after(prompt, text, "a")
    assert found is not None
    full = pairing(text + "a")
    k = next(i for i, (p, f) in enumerate(zip(prompt, full)) if p != f)
    assert found == (k, tuple(full[k:]))
    assert len(prompt) - k == 3  # the run's 97, 500, 500 merge with the label


def test_prompts_ending_alike_tokenize_each_form_once() -> None:
    fake = FakeBackend()
    calls: list[str] = []

    def counting(text: str) -> list[int]:
        calls.append(text)
        return fake.tokenize(text)

    tails = TailTokens(counting)
    end = "\n\nReply with one word: the category that fits this support ticket best.\nCategory:"
    assert len(end) >= TAIL_CHARS
    prompts = [f"Ticket {i}: the app {'crashes' if i % 2 else 'is slow'}.{end}" for i in range(10)]
    for text in prompts:
        continuations(fake.tokenize(text), text, ["bug", "feature"], True, counting, tails)
    assert len(calls) == 2 * 4  # the first prompt's 4 forms: the tail, the tail + form
