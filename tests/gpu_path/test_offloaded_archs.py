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
