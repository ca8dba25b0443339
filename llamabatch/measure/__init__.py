"""The measurement room: ``llamabatch bench``, ``llamabatch tune`` and the scripts of
``benchmarks/`` share its one runner, its statistics and its report.

Modules, one concept each: ``rounds`` (the runner: rounds in alternating order, fresh
items per round, warm-up, a clock; disjoint samples of items), ``stats`` (per-round
figures, paired ratios, spreads, intervals), ``noise`` (load and CPU time against wall
time), ``records`` (items as each path takes them, their replies), ``one_at_a_time``
(the ``Llama`` in a loop), ``compare`` (one at a time against the slot engine at each
slot count), ``summary`` (per setting over the rounds, the floor), ``agreement`` (equal
replies and labels), ``workloads`` (the synthetic prompts), ``raw`` (prefill/decode
tokens/s, llama-batched-bench's figures), ``host`` (the machine and model), ``verdict``
(use K slots, does not pay, cannot tell), ``report`` (tables and JSON documents),
``bench`` and ``tune`` (the two commands' measurements), ``plot`` (tune's PNG).
"""
