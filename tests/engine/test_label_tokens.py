"""Label tokens from the prompt's end (TailTokens): the same continuations as tokenizing
the whole prompt with each label, and each form tokenized once per prompt end."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch.engine.label_tokens import TAIL_CHARS, TailTokens
from llamabatch.engine.scoring import continuations
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


@settings(max_examples=300, deadline=None)
@given(
    body=st.text(alphabet="ab :x\n", min_size=0, max_size=150),
    labels=st.lists(st.sampled_from(["bug", "b", "ask", " bx", "x"]), min_size=1, max_size=3),
)
def test_the_tail_gives_what_the_whole_prompt_gives(body: str, labels: list[str]) -> None:
    text = body + "Category:"
    prompt = merging(text)
    tails = TailTokens(merging)

    def conts(t):
        try:
            return continuations(prompt, text, labels, True, merging, t)
        except ValueError as exc:
            return str(exc)

    assert conts(tails) == conts(None)
    assert conts(tails) == conts(None)  # from the kept answers too


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
