"""Measurement: rounds of fresh items in alternating order, one at a time against the
slot engine, paired ratios, agreement, and raw prefill/decode figures."""
