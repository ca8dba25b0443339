"""One measurement runner, for ``llamabatch bench``, ``llamabatch tune`` and the scripts
of ``benchmarks/``.

Modules, one concept each: ``rounds`` (the runner: rounds in alternating order, fresh
items per round, warm-up, a clock; disjoint samples of items), ``stats`` (per-round
figures, paired ratios, medians and spreads), ``records`` (items as each path takes them,
replies), ``one_at_a_time`` (the ``Llama`` in a loop), ``compare`` (one at a
time against the slot engine at each slot count), ``summary`` (per setting over the
rounds, the floor), ``agreement`` (equal replies and labels), ``workloads`` (the
synthetic prompts), ``raw`` (raw prefill/decode tokens/s, llama-batched-bench's figures).
"""
