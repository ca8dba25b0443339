"""SmolLM2 with every layer on the Vulkan device: the batch path's device paths.

Each test compares what a batch gives with the same prompts completed one at a time on
the same offloaded ``Llama`` (``slots=1``), token by token up to a near tie
(``tests/agreement.py``): a GPU backend's multi-sequence defects (a prompt joining other
sequences' decode step, batched softmax) would show as replies that part where the
model is confident.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from agreement import assert_completions_agree
from offload import N_GPU_LAYERS

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0, max_tokens=6)
#: Prompts SmolLM2 continues predictably at temperature 0 (design notes).
WORDS = ("apple", "dog", "red", "blue", "cat", "pear")
PROMPTS = [f"{w}, {w}, {w}, {w}," for w in WORDS]
#: A shared system prompt of ~40 tokens: prefix copies and host-memory states act on it.
TEMPLATE_A = (
    "<|im_start|>system\nYou answer with one word. Never add a comment of your own. "
    "Keep names as they are.<|im_end|>\n<|im_start|>user\n"
)
TEMPLATE_B = (
    "<|im_start|>system\nYou translate into French. Never explain. Keep every name "
    "as it is written.<|im_end|>\n<|im_start|>user\n"
)


def complete(llm, prompts, sampling=GREEDY, **kwargs):
    """The completions (none failed) and the stats of one generator on ``llm``."""
    kwargs.setdefault("n_ctx_seq", 256)
    with BatchGenerator(llm, **kwargs) as gen:
        done = gen.complete_many(prompts, sampling)
        stats = gen.stats
    assert all(c.error is None for c in done), [c.error for c in done]
    return done, stats


def test_a_refill_beside_other_sequences_decode_agrees_with_alone(llm, reference):
    """The mixed step: item 0 ends after one token, so item 2's prefill runs in the same
    decode call as item 1's reply step (the refill llama.cpp's GPU defects corrupt)."""
    prompts = PROMPTS[:3]
    per_item = [SamplingParams(temperature=0, max_tokens=n) for n in (1, 6, 6)]
    batched, stats = complete(llm, prompts, per_item, slots=2)
    alone, _ = complete(llm, prompts, per_item, slots=1)
    assert [c.path for c in batched] == ["batch"] * 3 and stats.items_batched == 3
    assert stats.batch_failures == 0
    assert_completions_agree(reference, llm, prompts, batched, alone)


def test_prefix_copies_and_host_memory_states_on_device_buffers(llm, reference):
    """Copies of a slot's cache into another and states saved to host memory and loaded
    back, all of device KV buffers: the replies still agree with alone."""
    first = [TEMPLATE_A + f"{w}<|im_end|>\n<|im_start|>assistant\n" for w in WORDS[:2]]
    other = [TEMPLATE_B + f"{w}<|im_end|>\n<|im_start|>assistant\n" for w in WORDS[2:4]]
    back = [TEMPLATE_A + f"{w}<|im_end|>\n<|im_start|>assistant\n" for w in WORDS[4:6]]
    prompts = first + other + back
    sampling = SamplingParams(temperature=0, max_tokens=3)
    batched, stats = complete(llm, prompts, sampling, slots=2, min_copy_tokens=8, cache_ram_mib=64)
    alone, _ = complete(llm, prompts, sampling, slots=1)
    assert stats.prefix_copies >= 1, stats
    assert stats.cache_ram_saves >= 1 and stats.cache_ram_loads >= 1, stats
    assert {c.path for c in batched} == {"batch"}
    assert_completions_agree(reference, llm, prompts, batched, alone)


def test_backend_sampling_is_off_by_default_and_verified_when_asked(llm, reference):
    """Chains sample on the host unless asked (a chain changed after a decode corrupted the
    heap: test_offloaded_archs.py), and ``Stats.backend_sampling`` says why; asked for, the
    device check verifies it first (greedy tokens sampled on the device equal the host
    chain's, a seed repeats), then greedy replies agree with the host chain's."""
    on_host, stats = complete(llm, PROMPTS[:3], slots=3)
    assert stats.backend_sampling is not None, stats
    assert stats.backend_sampling.startswith("off: not asked for (backend_sampling=True)")
    assert stats.backend_sampled_rows == 0
    on_device, device_stats = complete(llm, PROMPTS[:3], slots=3, backend_sampling=True)
    verdict = device_stats.backend_sampling
    assert verdict.startswith("on: greedy tokens sampled on the device equal"), verdict
    assert device_stats.backend_sampled_rows > 0
    assert_completions_agree(reference, llm, PROMPTS[:3], on_device, on_host)
    seeded = SamplingParams(temperature=0.9, seed=7, max_tokens=4)
    first, s1 = complete(llm, PROMPTS[:2], seeded, slots=2, backend_sampling=True)
    again, _ = complete(llm, PROMPTS[:2], seeded, slots=2, backend_sampling=True)
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert s1.backend_sampled_rows > 0


def test_label_scores_and_n_samples_offloaded(llm):
    """Label scores (rows read as numbers on the host) and ``n`` (a shared prefill row)
    run offloaded, batched, without a failure, and scores match their path alone."""
    prompt = TEMPLATE_A + "Is a dog an animal or a plant?<|im_end|>\n<|im_start|>assistant\n"
    labels = SamplingParams(choices=["animal", "plant"], score_choices=True)
    batched, stats = complete(llm, [prompt, prompt + " "], labels, slots=2)
    alone, _ = complete(llm, [prompt, prompt + " "], labels, slots=1)
    for b, a in zip(batched, alone):
        for label in ("animal", "plant"):
            assert abs(b.choice_logprobs[label] - a.choice_logprobs[label]) <= 0.2
    three, stats = complete(
        llm, PROMPTS[:1], SamplingParams(temperature=0.8, seed=3, n=3, max_tokens=3), slots=3
    )
    assert len(three[0].samples) == 3 and stats.batch_failures == 0


class FailingDecode:
    """Decode hook: the batched decodes numbered in ``at`` (1-based) return ``code``
    instead of decoding; the others run."""

    def __init__(self, at: set[int], code: int) -> None:
        self.at, self.code, self.calls = at, code, 0

    def __call__(self, n_tokens: int) -> int | None:
        self.calls += 1
        return self.code if self.calls in self.at else None


def test_a_failed_decode_on_the_device_retries_its_items_alone(llm, reference):
    """A batched decode that fails on the device costs the items in flight one retry
    alone; after ``max_batch_failures`` in a row batching is off; nothing is lost."""
    hook = FailingDecode({3}, -3)  # counts the engine's decodes: no device check before
    backend = LlamaBackend(llm, decode_hook=hook)
    with BatchGenerator(
        backend=backend, slots=2, n_ctx_seq=256, sampling=GREEDY, check_device=False
    ) as gen:
        done = gen.complete_many(PROMPTS[:3])
        stats = gen.stats
    alone, _ = complete(llm, PROMPTS[:3], slots=1)
    assert stats.batch_failures == 1 and stats.items_retried >= 1
    assert stats.batching_enabled
    assert_completions_agree(reference, llm, PROMPTS[:3], done, alone)
    hook = FailingDecode(set(range(1, 100)), -3)
    backend = LlamaBackend(llm, decode_hook=hook)
    with BatchGenerator(
        backend=backend,
        slots=2,
        n_ctx_seq=256,
        sampling=GREEDY,
        max_batch_failures=2,
        check_device=False,
    ) as gen:
        done = gen.complete_many(PROMPTS[:4])
        stats = gen.stats
    assert all(c.error is None and c.path == "alone" for c in done)
    assert not stats.batching_enabled and "max_batch_failures=2" in stats.batch_disabled_reason


def test_the_device_check_runs_by_default_and_passes(llm, gpu_device):
    """On a device the generator runs every probe step (mixed step, refill, a prompt past
    n_ubatch; 2 and 3 sequences) against one at a time before its first batch
    (``check_device`` default), and lavapipe passes every step."""
    done, stats = complete(llm, PROMPTS[:3], slots=3)
    assert stats.device_check is not None, stats
    assert f"logits on {gpu_device.name} agree" in stats.device_check, stats.device_check
    assert "2, 3 sequences" in stats.device_check and "failed" not in stats.device_check
    assert stats.batching_enabled and {c.path for c in done} == {"batch"}


def test_auto_slots_are_sized_from_the_devices_free_memory(llm, gpu_device):
    with BatchGenerator(llm, slots="auto", n_ctx_seq=256, check_device=False) as gen:
        choice = gen.slots_choice
    assert f"free on {gpu_device.name}" in choice.reason, choice.reason
    assert gen.config.slots == choice.slots and 1 <= choice.slots <= 8


class SmallDevice(LlamaBackend):
    """A device that cannot hold a batch context of more than ``max_slots`` sequences
    (lavapipe allocates past its 2 GiB heap, so the refusal is a stand-in)."""

    def __init__(self, llm, max_slots: int) -> None:
        super().__init__(llm)
        self.limit, self.tried = max_slots, []

    def open(self, slots, n_ctx_seq, n_batch):
        from llamabatch.errors import BatchUnavailable

        self.tried.append((slots, n_ctx_seq))
        if slots > self.limit:
            raise BatchUnavailable(f"the device cannot hold {slots} sequences (stand-in)")
        return super().open(slots, n_ctx_seq, n_batch)


def test_a_batch_the_device_cannot_hold_is_tried_smaller(llm):
    backend = SmallDevice(llm, max_slots=2)
    with BatchGenerator(backend=backend, slots=8, n_ctx_seq=256, sampling=GREEDY) as gen:
        done = gen.complete_many(PROMPTS[:3])
        limits = gen.limits
    assert backend.tried[:3] == [(8, 256), (4, 256), (2, 256)]
    assert limits is not None and limits.n_seq_max == 2
    assert all(c.error is None and c.path == "batch" for c in done)


ESTIMATE = """
    import os, llama_cpp
    from llamabatch import BatchGenerator
    llm = llama_cpp.Llama(os.environ["MODEL"], n_ctx=512, n_threads=2, n_gpu_layers=-1,
                          verbose=True)
    est = BatchGenerator.estimate_memory(llm, slots=3, n_ctx_seq=300)
    print("ESTIMATE", est.total_bytes, flush=True)
    with BatchGenerator(llm, slots=3, n_ctx_seq=300, max_tokens=1) as gen:
        gen.complete_many(["Hi", "Yo"])
        print("STATS", gen.stats.kv_bytes, flush=True)
"""


def test_the_memory_estimate_is_what_the_device_allocates(model_path):
    """``estimate_memory`` against the KV buffer llama.cpp logs for the device."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ESTIMATE)],
        env=dict(os.environ, MODEL=str(model_path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    total = int(re.search(r"ESTIMATE (\d+)", result.stdout).group(1))
    buffers = re.findall(r"llama_kv_cache: +(\S+) KV buffer size = +([\d.]+) MiB", result.stderr)
    device, mib = buffers[-1]  # the Llama's own cache first, the batch context's last
    assert device.startswith("Vulkan"), buffers
    assert abs(total / 2**20 - float(mib)) <= 0.005
    assert f"STATS {total}" in result.stdout


def test_doctor_passes_offloaded(model_path):
    """``llamabatch doctor`` with every layer on the device: every check passes."""
    assert N_GPU_LAYERS == -1
    result = subprocess.run(
        [sys.executable, "-m", "llamabatch", "doctor", "--model", str(model_path),
         "--n-gpu-layers", "-1", "--slots", "2", "--n-ctx-seq", "256"],
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Vulkan" in result.stdout + result.stderr
