"""The example of docs/testing.md (Testing your tagger with FakeBackend), verbatim: a downstream
tagger's tests on FakeBackend. ``test_the_readme_example_is_this_file`` keeps them equal.
"""

from hypothesis import given
from hypothesis import strategies as st

from llamabatch import BatchGenerator
from llamabatch.testing import FakeBackend, fake_backends


def tag_all(gen: BatchGenerator, texts: list[str]) -> list[str]:
    """The tagger under test: one label per text, "unknown" when an item failed."""
    prompts = [f"Tag: {text}\nLabel:" for text in texts]
    return [c.text.strip() if c.ok else "unknown" for c in gen.complete_many(prompts)]


def test_tag_all_labels_each_text_in_order():
    replies = {"Tag: apple\nLabel:": " fruit", "Tag: kale\nLabel:": " vegetable"}
    fake = FakeBackend(replies)
    with BatchGenerator(backend=fake, slots=4, max_tokens=16) as gen:
        labels = tag_all(gen, ["apple", "kale", "apple"])
        assert labels == ["fruit", "vegetable", "fruit"]
    assert gen.stats.items_batched == 3 and fake.violations == []


def test_tag_all_survives_a_failed_batch_and_a_failing_item():
    fake = FakeBackend(
        {"Tag: apple\nLabel:": " fruit", "Tag: kale\nLabel:": " vegetable"},
        fail_decode_at=1,
        fail_code=-3,
        fail_alone={tuple(b"Tag: \nLabel:")},
    )
    with BatchGenerator(backend=fake, slots=4, max_tokens=16) as gen:
        assert tag_all(gen, ["apple", "", "kale"]) == ["fruit", "unknown", "vegetable"]
    assert "-3" in gen.stats.last_batch_failure  # batching went on after one failure


@given(fake=fake_backends(), texts=st.lists(st.text(max_size=30), max_size=20))
def test_tag_all_gives_one_label_per_text_whatever_happens(fake, texts):
    with BatchGenerator(backend=fake, slots=4, max_tokens=16) as gen:
        labels = tag_all(gen, texts)
    assert len(labels) == len(texts)
    assert fake.violations == []


def test_the_readme_example_is_this_file():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    docs = [
        p
        for p in (root / "docs" / "testing.md",)
        if p.exists() and "def tag_all(" in p.read_text(encoding="utf-8")
    ]
    assert docs, "the example is not in docs/testing.md"
    mine = Path(__file__).read_text(encoding="utf-8")
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        start = text.index("from hypothesis import given", text.index("def tag_all(") - 400)
        example = text[start : text.index("```", start)]
        assert example in mine, f"{doc.name}'s example differs from this file"
