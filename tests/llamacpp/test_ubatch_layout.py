"""The slot engine's decodes as llama.cpp computes them: one ubatch per step.

A non-unified KV cache (one stream per sequence) puts into one ubatch only sequences
whose ids follow each other in batch order; any other layout costs one more pass over
the weights per step, and the graph of the previous ubatch can then never be reused.
The engine lays every decode out by seq id, so while the same slots decode, llama.cpp
reuses its graph from step to step (``llama_perf_context(ctx).n_reused``).
"""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_steady_decode_steps_reuse_llama_cpps_graph_whatever_the_refill_order(llm):
    # caps of different lengths make the slots free up and refill in a rotating order
    caps = [24, 30, 36, 42, 18, 27, 33, 21, 39, 25, 29, 35]
    items = [chat(f"Count from 1 to 60, one number per line. ({k})") for k in range(12)]
    sampling = [SamplingParams(temperature=0.0, max_tokens=c) for c in caps]
    backend = LlamaBackend(llm)
    with BatchGenerator(backend=backend, slots=4, n_ctx_seq=256) as gen:
        gen.complete_many(items[:4], sampling=sampling[:4])  # opens the context
        ctx = backend.batch_context
        before, calls_before = ctx.graphs_reused, gen.stats.decode_calls
        assert before is not None  # every supported binding counts graph reuse
        out = gen.complete_many(items, sampling=sampling)
        reused = ctx.graphs_reused - before
        steps = gen.stats.decode_calls - calls_before
    assert all(c.error is None and c.path == "batch" for c in out)
    # Each refill costs a few fresh graphs (the step that starts a prompt is split
    # into two ubatches); every other step reuses the last one. Laid out in
    # placement order instead, most steps would be two ubatches and reuse nothing.
    assert steps > 60
    assert reused >= steps - 4 * len(items)
