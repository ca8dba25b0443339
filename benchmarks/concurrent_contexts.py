"""Can the batch context decode while the ``Llama`` decodes on its own context? (not CI)

Both contexts share one ``llama_model``. llamabatch serializes every use of llama.cpp per
``Llama`` (:func:`llamabatch.llm_lock`); this script measures what happens without that
lock for the *batched* path: thread A runs fully batched groups (no item goes through the
``Llama``), thread B calls ``llm.create_completion`` on the ``Llama`` itself, unlocked.
ctypes releases the GIL during ``llama_decode``, so both decodes really overlap.

It reports whether every greedy result equals the serial run's, and the wall time of
both threads together against the same work run one call after the other.

    .venv/bin/python benchmarks/concurrent_contexts.py [--rounds 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import llama_cpp

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.model import default_model_path

GREEDY = SamplingParams(temperature=0)
BATCHED = ["Apples are", "The capital of France is"]
OWN = "Bananas are yellow because"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2, help="n_threads of each context")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    llm = llama_cpp.Llama(
        model_path=str(default_model_path()), n_ctx=512, n_threads=args.threads, verbose=False
    )
    gen = BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=args.max_tokens, sampling=GREEDY)

    def batched() -> list[str]:
        done = gen.complete_many(BATCHED)
        if any(c.path != "batch" for c in done):
            raise RuntimeError("an item was not batched: the experiment needs batch only")
        return [c.text for c in done]

    def own() -> str:
        llm.reset()  # full prompt evaluation each time (no prefix reuse)
        out = llm.create_completion(OWN, max_tokens=args.max_tokens, temperature=0)
        return out["choices"][0]["text"]

    want_batched, want_own = batched(), own()  # warm-up, reference results
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        batched()
        own()
    serial_s = time.perf_counter() - t0

    got_batched: list[list[str]] = []
    got_own: list[str] = []
    errors: list[BaseException] = []

    def run(fn, sink) -> None:
        try:
            for _ in range(args.rounds):
                sink.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(batched, got_batched)),
        threading.Thread(target=run, args=(own, got_own)),
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    concurrent_s = time.perf_counter() - t0
    gen.close()
    report = {
        "rounds": args.rounds,
        "n_threads_per_context": args.threads,
        "max_tokens": args.max_tokens,
        "errors": [repr(e) for e in errors],
        "batched_equal_serial": all(g == want_batched for g in got_batched),
        "own_equal_serial": all(g == want_own for g in got_own),
        "n_batched": len(got_batched),
        "n_own": len(got_own),
        "serial_s": round(serial_s, 2),
        "concurrent_s": round(concurrent_s, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
