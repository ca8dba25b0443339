"""Resident memory a batch context adds, default n_ctx_seq vs 4096, on a Llama(n_ctx=512).

Issue 10, fault 4: ``python benchmarks/kv_memory_rss.py default`` and
``python benchmarks/kv_memory_rss.py 4096`` (separate processes, so each RSS starts clean);
prints the allocated n_ctx_seq, ``stats.kv_bytes`` and the RSS growth (VmRSS, Linux).
"""

from __future__ import annotations

import sys

import llama_cpp

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.model import default_model_path


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(arg: str) -> None:
    n_ctx_seq = None if arg == "default" else int(arg)
    llm = llama_cpp.Llama(str(default_model_path()), n_ctx=512, n_threads=1, verbose=False)
    llm.create_completion("Hi", max_tokens=1)  # the Llama's own buffers first
    before = rss_mib()
    with BatchGenerator(
        llm, slots=4, n_ctx_seq=n_ctx_seq, max_tokens=2, sampling=SamplingParams(temperature=0)
    ) as gen:
        gen.complete_many(["Name a color."] * 4)
        print(
            f"n_ctx_seq={arg}: allocated {gen.limits.n_ctx_seq} per slot, "
            f"stats.kv_bytes={gen.stats.kv_bytes / 2**20:.2f} MiB, "
            f"RSS +{rss_mib() - before:.1f} MiB"
        )
    llm.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "default")
