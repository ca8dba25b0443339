"""Every kind of model memory offloaded: the random models of ``scripts/make-tiny-models``
(vocabulary of 128 ids, prompts are token ids) with every layer on the Vulkan device,
batched (2 slots, so the third prompt refills beside another's decode) against one at a
time, greedy, up to a near tie (``tests/agreement.py``)."""

from __future__ import annotations

import random

import pytest
from agreement import Reference, assert_replies_agree
from offload import N_GPU_LAYERS

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

#: llama (plain attention) is SmolLM2 in test_offloaded.py.
ARCHS = ("qwen35", "mamba2", "lfm2", "gemma3", "qwen3")
GREEDY = SamplingParams(temperature=0, max_tokens=4)
#: fp16-like device logits: a random model's near ties are wider than the CPU's 1e-2.
TIE_TOLERANCE = 0.1


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_equals_alone_offloaded(arch, tiny_models_dir):
    import llama_cpp

    path = tiny_models_dir / f"{arch}-dense.gguf"
    assert path.is_file(), f"{path} is missing: scripts/make-tiny-models writes it"
    kwargs = {"n_gpu_layers": N_GPU_LAYERS}
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=2, verbose=False, **kwargs)
    reference = Reference(path, n_ctx=512, kwargs=kwargs)
    try:
        rng = random.Random(arch)
        n_vocab = int(llm.n_vocab())
        prompts = [[rng.randrange(n_vocab) for _ in range(n)] for n in (9, 17, 12)]
        per_item = [SamplingParams(temperature=0, max_tokens=n) for n in (1, 4, 4)]
        runs = {}
        for slots in (2, 1):
            with BatchGenerator(llm, slots=slots, n_ctx_seq=256, sampling=GREEDY) as gen:
                done = gen.complete_many(prompts, per_item)
                eog = frozenset(gen.backend.vocab.eog_ids)
                assert all(c.error is None for c in done), [c.error for c in done]
                assert gen.stats.batch_failures == 0
                runs[slots] = done
        assert {c.path for c in runs[2]} == {"batch"}
        assert_replies_agree(
            reference,
            prompts,
            [c.token_ids for c in runs[2]],
            [c.token_ids for c in runs[1]],
            eog,
            TIE_TOLERANCE,
        )
    finally:
        reference.close()
        llm.close()


CHAIN_SWAPS = """
    import os, random, llama_cpp
    from llamabatch import BatchGenerator, SamplingParams
    llm = llama_cpp.Llama(os.environ["MODEL"], n_ctx=512, n_threads=2, n_gpu_layers=-1,
                          verbose=False)
    rng = random.Random(56)
    prompts = [[rng.randrange(int(llm.n_vocab())) for _ in range(5 + i % 4)] for i in range(12)]
    kinds = [
        SamplingParams(temperature=0, max_tokens=3),
        SamplingParams(temperature=0.9, seed=5, max_tokens=2),
        SamplingParams(temperature=0, max_tokens=4, logprobs=2),
        SamplingParams(temperature=0.7, top_k=5, seed=6, max_tokens=3),
    ]
    per_item = [kinds[i % 4] for i in range(12)]
    replies = {}
    for backend_sampling in (None, False):
        with BatchGenerator(llm, slots=3, n_ctx_seq=64, backend_sampling=backend_sampling) as gen:
            done = gen.complete_many(prompts, per_item)
            assert all(c.error is None for c in done), [c.error for c in done]
            print("STATS", backend_sampling, gen.stats.backend_sampling,
                  gen.stats.backend_sampled_rows, gen.stats.items_batched, flush=True)
            replies[backend_sampling] = [c.token_ids for c in done]
    print("SAME_REPLIES", replies[None] == replies[False])
"""


def test_slots_that_take_items_of_other_sampling_settings_do_not_crash(tiny_models_dir):
    """The heap corruption, reduced: on this Vulkan device, a batch context whose sequences
    sampled on the device (``llama_set_sampler``), where a chain was then attached, replaced
    or detached after a decode, corrupted the heap at the next decode (SIGSEGV in
    ``llama_synchronize``, or ``double free or corruption``). A batch does that whenever a
    slot takes an item of other sampling settings (greedy, seeded, logprobs in turn), so on a
    GPU chains sample on the host by default: every item completes, as with
    ``backend_sampling=False``."""
    import os
    import subprocess
    import sys
    import textwrap

    path = tiny_models_dir / "qwen3-dense.gguf"
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(CHAIN_SWAPS)],
        env=dict(os.environ, MODEL=str(path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [line.split(" ", 2) for line in result.stdout.splitlines() if line[:5] == "STATS"]
    assert [line[1] for line in lines] == ["None", "False"], result.stdout
    assert lines[0][2].startswith("off: not asked for (backend_sampling=True): a chain"), (
        result.stdout
    )
    assert lines[0][2].endswith(" 0 12") and lines[1][2].endswith(" 0 12"), result.stdout
    assert "SAME_REPLIES True" in result.stdout
