"""Benchmarks that drive the engine: raw tokens/s, a tagging workload, host facts, report."""
