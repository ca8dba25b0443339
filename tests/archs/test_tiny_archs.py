"""Every kind of model memory, on the random models of ``scripts/make-tiny-models``.

One model per architecture (``LLAMABATCH_TINY_MODELS/ARCH-dense.gguf``, llama.cpp's
``test-llama-archs``: vocabulary of 128 ids, no tokenizer, so prompts are token ids):

=============  =====================================================
qwen35         hybrid: attention + gated delta-net (recurrent) layers
mamba2         recurrent only
lfm2           short convolution + attention
granitehybrid  mamba2 + attention
gemma3         sliding-window attention + global attention
qwen3          plain attention
=============  =====================================================

Prompts are 5-700 random token ids (so a prefill crosses 512-token chunks), 4 slots,
greedy. Checked: batched replies equal one-at-a-time replies (``slots=1``: the ``Llama``
itself); a second pass over the same prompts on the same generator equals the first;
prompts sharing a long prefix (what prefix reuse acts on) equal their replies alone,
before and after other prompts ran; nothing fails, nothing leaks between passes.

Near ties. A random model's logits can be nearly tied, and llama.cpp's CPU kernels are
not batch-invariant (summation order depends on the batch), so two paths may pick
different tokens where two logits differ by rounding. Replies are compared with the
suite's rule (``tests/agreement.py``): token by token; where they first differ, the
logits at that point are computed by a separate ``Llama(logits_all=True)`` on the same
file, and the divergence is accepted only if the two chosen tokens' logits are within
:data:`TIE_TOLERANCE` of each other (the rest of the reply is then not compared).
At least half of the replies must match in full, so the comparison cannot pass vacuously.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from agreement import Reference, assert_replies_agree

from llamabatch import BatchGenerator, Completion, SamplingParams

pytestmark = pytest.mark.real_model

ARCHS = ("qwen35", "mamba2", "lfm2", "granitehybrid", "gemma3", "qwen3")

#: Largest |logit(a) - logit(b)| (natural-log units, the model's raw output) at which two
#: different greedy picks count as a tie. CPU float32 kernels differ between batch sizes by
#: rounding only, orders of magnitude below this.
TIE_TOLERANCE = 1e-2

GREEDY = SamplingParams(temperature=0.0)
MAX_TOKENS = 8
SLOTS = 4
N_CTX_SEQ = 1024
#: prompt lengths: 2 groups of 4; 513 and 700 need two prefill chunks of n_batch=512
LENGTHS = (5, 700, 37, 513, 260, 12, 650, 129)


@dataclass
class Arch:
    name: str
    llm: object  # the Llama the generators run on
    reference: Reference  # a Llama(logits_all=True) on the same file, for near ties
    n_vocab: int
    eog_ids: frozenset  # end-of-generation ids (llama_vocab_is_eog)


@pytest.fixture(scope="module", params=ARCHS)
def arch(request, tiny_models_dir):
    import llama_cpp

    path = tiny_models_dir / f"{request.param}-dense.gguf"
    if not path.is_file():
        pytest.fail(f"{path} is missing: scripts/make-tiny-models writes it")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=2, verbose=False)
    reference = Reference(path, n_ctx=2048)
    assert llm.metadata["general.architecture"] == request.param
    with BatchGenerator(llm) as gen:
        eog_ids = frozenset(gen.backend.vocab.eog_ids)
    yield Arch(request.param, llm, reference, int(llm.n_vocab()), eog_ids)
    reference.close()
    llm.close()


def random_prompts(n_vocab: int, lengths, seed: int, prefix: list[int] = ()) -> list[list[int]]:
    rng = random.Random(seed)
    return [list(prefix) + [rng.randrange(n_vocab) for _ in range(n)] for n in lengths]


def compare(arch: Arch, prompts, got: list[Completion], want: list[Completion]) -> list:
    """Assert ``got`` agrees with ``want`` up to near ties; return the divergences."""
    for g, w in zip(got, want):
        assert g.error is None and w.error is None, (g.error, w.error)
    return assert_replies_agree(
        arch.reference,
        prompts,
        [g.token_ids for g in got],
        [w.token_ids for w in want],
        arch.eog_ids,
        TIE_TOLERANCE,
    )


def assert_no_leak(gen: BatchGenerator, results: list[Completion]) -> None:
    """Each sequence holds at most one item's prompt + reply (emptied or kept for reuse)."""
    ctx = gen.backend.batch_context
    longest = max(c.n_prompt_tokens + c.n_tokens for c in results)
    held = [ctx.seq_pos_max(s) for s in range(ctx.limits.n_seq_max)]
    assert all(-1 <= pos < longest for pos in held), (held, longest)


def test_batched_equals_alone_and_a_second_pass_equals_the_first(arch):
    prompts = random_prompts(arch.n_vocab, LENGTHS, seed=11)
    with BatchGenerator(
        arch.llm, slots=SLOTS, n_ctx_seq=N_CTX_SEQ, max_tokens=MAX_TOKENS, sampling=GREEDY
    ) as gen:
        first = gen.complete_many(prompts)
        assert_no_leak(gen, first)
        second = gen.complete_many(prompts)
        assert_no_leak(gen, second)
        stats = gen.stats
    with BatchGenerator(arch.llm, slots=1, max_tokens=MAX_TOKENS, sampling=GREEDY) as gen:
        alone = gen.complete_many(prompts)

    assert [c.index for c in first] == list(range(len(prompts)))
    assert [c.path for c in first + second] == ["batch"] * (2 * len(prompts))
    assert [c.path for c in alone] == ["alone"] * len(prompts)
    assert [c.n_prompt_tokens for c in first] == list(LENGTHS)
    assert stats.batching_enabled and stats.items_failed == 0
    assert stats.items_batched == 2 * len(prompts)
    assert stats.generated_tokens == sum(c.n_tokens for c in first + second)
    assert sum(c.n_tokens for c in alone) > 0, "the model ends every reply at once"
    compare(arch, prompts, first, alone)
    compare(arch, prompts, second, first)


def test_shared_prefixes_change_nothing(arch):
    prefix = random_prompts(arch.n_vocab, [300], seed=5)[0]
    shared = random_prompts(arch.n_vocab, (5, 250, 40, 120, 1, 64), seed=6, prefix=prefix)
    shared.insert(3, list(shared[0]))  # the same prompt twice
    shared.append(list(prefix))  # the prefix itself, a prefix of all the others
    others = random_prompts(arch.n_vocab, (90, 310, 7, 520), seed=7)
    with BatchGenerator(
        arch.llm, slots=SLOTS, n_ctx_seq=N_CTX_SEQ, max_tokens=MAX_TOKENS, sampling=GREEDY
    ) as gen:
        before = gen.complete_many(shared)
        gen.complete_many(others)
        after = gen.complete_many(shared)
        assert_no_leak(gen, after)
        stats = gen.stats
    with BatchGenerator(arch.llm, slots=1, max_tokens=MAX_TOKENS, sampling=GREEDY) as gen:
        alone = gen.complete_many(shared)

    assert {c.path for c in before + after} == {"batch"}
    assert stats.batching_enabled and stats.items_failed == 0
    assert before[3].token_ids == before[0].token_ids  # same prompt, same group
    compare(arch, shared, before, alone)
    compare(arch, shared, after, alone)
