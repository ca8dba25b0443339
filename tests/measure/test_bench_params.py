"""``llamabatch bench``'s measurement parameters (:class:`BenchParams`): the context the
``Llama`` is loaded with, so that one at a time never meets a prompt it cannot hold."""

from __future__ import annotations

from llamabatch.measure.bench import BenchParams
from llamabatch.measure.raw import CTX_PAD


def test_llama_context_holds_the_longest_synthetic_prompt_and_its_reply():
    s = BenchParams(workload="S", max_tokens=48, parts=("workload",))
    # S: ~390 shared tokens + up to 150 ticket tokens: 600 at least, plus the reply cap
    assert s.llama_n_ctx >= 600 + 48 and s.llama_n_ctx % CTX_PAD == 0
    tagging = BenchParams(workload="tagging", prompt_tokens=1000, max_tokens=64)
    # tagging prompts vary within +-40 % of PP
    assert tagging.llama_n_ctx >= 1400 + 64


def test_llama_context_of_a_file_is_its_n_ctx_seq_and_holds_the_raw_bench():
    only_workload = BenchParams(
        workload="prompts", prompts="items.jsonl", n_ctx_seq=1000, parts=("workload",)
    )
    assert only_workload.llama_n_ctx == 1000
    both = BenchParams(
        workload="prompts", prompts="items.jsonl", n_ctx_seq=100, prompt_tokens=256, gen_tokens=64
    )
    assert both.llama_n_ctx == 256 + 64
