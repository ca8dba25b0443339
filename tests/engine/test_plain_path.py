"""A plain item (one reply, no scores) never runs code of ``llamabatch.engine.features``:
the features sit in front of the scheduler and are entered only by the items that use
them (``n`` > 1, ``score_choices``, ``score_prompt``)."""

from __future__ import annotations

import sys
from pathlib import Path

import llamabatch.engine.features
from llamabatch import BatchGenerator, SamplingParams
from llamabatch.testing import FakeBackend

FEATURES_DIR = str(Path(llamabatch.engine.features.__file__).parent)


def _features_run(gen: BatchGenerator, prompts: list[str], sampling: SamplingParams) -> set[str]:
    """The functions of features/ called while ``prompts`` are completed."""
    called: set[str] = set()

    def profile(frame, event, arg) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(FEATURES_DIR):
            called.add(f"{Path(code.co_filename).name}:{code.co_name}")

    sys.setprofile(profile)
    try:
        out = gen.complete_many(prompts, sampling)
    finally:
        sys.setprofile(None)
    assert all(c.ok for c in out)
    return called


def test_plain_items_batched_and_alone_do_not_enter_features() -> None:
    prompts = [f"plain prompt {i}" for i in range(6)]
    for slots in (1, 3):
        with BatchGenerator(backend=FakeBackend(), slots=slots, max_tokens=6) as gen:
            assert _features_run(gen, prompts, SamplingParams(stop=["x"])) == set()


def test_items_that_use_a_feature_enter_it() -> None:
    prompts = [f"featured prompt {i}" for i in range(3)]
    with BatchGenerator(backend=FakeBackend(), slots=3, max_tokens=6) as gen:
        n_calls = _features_run(gen, prompts, SamplingParams(n=2, seed=1))
        scored = _features_run(gen, prompts, SamplingParams(choices=["a", "b"], score_choices=True))
    assert "samples.py:expand" in n_calls and "samples.py:merge" in n_calls
    assert "labels.py:label_request" in scored
