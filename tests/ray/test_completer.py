"""BatchCompleter and processor(): batches of NumPy columns in, one output row per input
row out, a bad row's error in its place; on the cluster, an actor killed mid-job is
restarted and every row comes out once."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
import ray

from llamabatch import BatchConfig, SamplingParams
from llamabatch.ray import BatchCompleter, ProcessorConfig, processor

pytestmark = pytest.mark.real_model

CONFIG = BatchConfig(n_ctx_seq=512, slots=2, max_tokens=4, sampling=SamplingParams(temperature=0))
SMALL = dict(n_threads=1, batch_config=CONFIG)


@pytest.fixture(scope="module")
def completer(model_path) -> BatchCompleter:
    """One completer in this process (as an actor makes it)."""
    return BatchCompleter(str(model_path), **SMALL)


def _object_column(values) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for k, v in enumerate(values):
        column[k] = v
    return column


def test_a_bad_row_gets_its_error_in_place_and_the_others_are_intact(completer):
    batch = {
        "id": np.array([1, 2, 3, 4, 5, 6]),
        "prompt": _object_column(["The sky is", None, "x", None, "y", "Two plus two is"]),
        "messages": _object_column([None, None, None, "[{not json", None, None]),
        # a nullable integer column comes from Arrow as floats, NaN where missing
        "max_tokens": np.array([np.nan, np.nan, np.nan, np.nan, 2.0, 3.0]),
        "temperature": _object_column([None, None, -1, None, None, None]),
    }
    out = completer(batch)
    assert list(out["id"]) == [1, 2, 3, 4, 5, 6]
    assert set(out) >= {"text", "finish_reason", "error", "n_prompt_tokens", "n_tokens", "path"}
    reasons = list(out["finish_reason"])
    assert reasons[1] == reasons[2] == reasons[3] == "error", out
    assert "exactly one of" in out["error"][1] and "temperature" in out["error"][2]
    assert "not valid JSON" in out["error"][3]
    assert [out["error"][k] for k in (0, 4, 5)] == [None, None, None]
    assert 1 <= out["n_tokens"][0] <= 4 and out["text"][0]
    assert 1 <= out["n_tokens"][4] <= 2 and 1 <= out["n_tokens"][5] <= 3


def test_a_rows_sampling_params_and_its_constraint_replace_the_defaults(model_path):
    config = replace(CONFIG, sampling=SamplingParams(temperature=0, choices=["x"]))
    labels = BatchCompleter(str(model_path), n_threads=1, batch_config=config)
    batch = {
        "prompt": _object_column(["a", "b", "c"]),
        "sampling_params": _object_column(
            [None, '{"response_format": {"type": "text"}}', {"logprobs": 1}]
        ),
    }
    out = labels(batch)
    assert out["text"][0] == "x" and out["text"][2] == "x"
    assert out["text"][1] != "x" and out["n_tokens"][1] == 4  # the constraint is lifted
    assert list(out["logprobs"])[:2] == [None, None] and out["logprobs"][2].startswith("[[[")


@pytest.fixture(scope="module")
def cluster(ray_address):
    import killable

    ray.cloudpickle.register_pickle_by_value(sys.modules["killable"])
    return killable


def test_an_actor_killed_mid_job_is_restarted_and_every_row_comes_out_once_bad_row_in_place(
    cluster, model_path
):
    switch = cluster.KillSwitch.options(name=cluster.SWITCH).remote()
    rows = [{"id": k, "prompt": f"Count to {k}:"} for k in range(12)]
    rows[5] = {"id": 5, "prompt": "x", "sampling_params": {"top_p": 7}}  # a bad row
    config = ProcessorConfig(str(model_path), **SMALL, batch_size=4, completer=cluster.KilledOnce)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    try:
        out = processor(config)(ray.data.from_items(rows, override_num_blocks=3)).take_all()
    finally:
        ctx.execution_options.preserve_order = False
    assert ray.get(switch.count.remote()) == 1  # an actor was killed
    assert [r["id"] for r in out] == list(range(12))
    assert "top_p" in out[5]["error"] and out[5]["finish_reason"] == "error"
    assert all(r["error"] is None and r["n_tokens"] >= 1 for r in out if r["id"] != 5), out
    ray.kill(switch)
