#!/usr/bin/env python3
"""The slot engine against one at a time on workloads S, U and L, and where a step's time goes.

For each workload, on one loaded ``Llama`` (every layer on the GPU by default):

1. ``llamabatch bench``'s workload part (:func:`llamabatch.measure.bench.bench` with
   ``parts=("workload",)``): fresh prompts every round, greedy, seconds per item of
   ``Llama.create_completion`` one at a time and of ``BatchGenerator(slots=B)`` for each
   B, alternating in every round; ratio = s/item batched over s/item one at a time in
   the same round (below 1: batching wins). Replies have fixed lengths when the model's
   EOG never wins greedy sampling (``random_gguf.py``'s models): ``max_tokens`` each.
2. One more, instrumented pass of the first round's prompts per B, splitting the wall
   time into: ``llama_decode`` (the ctypes call), ``llama_sampler_sample`` (on CUDA this
   also waits for the GPU: llama.cpp synchronizes when logits are read), the rest of
   ``LlamaBackend.decode`` (batch fill, output checks) and the rest (scheduler, stop
   rule, detokenization, the generator): milliseconds per decode step. The same for the
   one-at-a-time loop, with llama-cpp-python's ``llama_decode`` calls counted.

Writes one JSON document (``--json``); prints the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

PATCHED = "llamabatch"


@contextlib.contextmanager
def timed(
    targets: Sequence[tuple[Any, str, str]], spent: dict[str, float], calls: dict[str, int]
) -> Iterator[None]:
    """Wrap ``getattr(owner, attr)`` for each ``(owner, attr, key)``: add its seconds to
    ``spent[key]`` and count it in ``calls[key]``; restore the originals after."""
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in targets]

    def wrap(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        def inner(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
                calls[key] += 1

        return inner

    for (owner, attr, fn), (_, _, key) in zip(originals, targets):
        setattr(owner, attr, wrap(fn, key))
    try:
        yield
    finally:
        for owner, attr, fn in originals:
            setattr(owner, attr, fn)


def per_step(
    wall: float, spent: dict[str, float], calls: dict[str, int], tokens: int
) -> dict[str, Any]:
    """Milliseconds per decode step of one instrumented pass."""
    steps = calls["llama_decode"]
    if steps == 0:
        return {"wall_s": wall, "steps": 0, "tokens": tokens}
    ms = 1000.0 / steps
    decode, sample = spent["llama_decode"], spent.get("sample", 0.0)
    backend = spent.get("backend_decode", decode + sample)
    return {
        "wall_s": wall,
        "steps": steps,
        "tokens": tokens,
        "step_ms": wall * ms,
        "llama_decode_ms": decode * ms,
        "sample_ms": sample * ms,
        "backend_other_ms": (backend - decode - sample) * ms,
        "engine_other_ms": (wall - backend) * ms,
        "python_ms": (wall - decode - sample) * ms,
        "python_share": (wall - decode - sample) / wall if wall > 0 else 0.0,
    }


def instrumented_batched(
    setup: Any, b: int, prompts: Sequence[str], n_ctx_seq: int, cap: int
) -> dict[str, Any]:
    from llamabatch._ffi.library import Library
    from llamabatch._ffi.sampling import SamplerChains
    from llamabatch.llamacpp.backend import LlamaBackend

    gen = setup.make_generator(b, n_ctx_seq, cap)
    try:
        gen.complete_many(list(prompts[: min(b, 2)]))  # opens the batch context, untimed
        spent: dict[str, float] = defaultdict(float)
        calls: dict[str, int] = defaultdict(int)
        targets = [
            (Library, "decode", "llama_decode"),
            (SamplerChains, "sample", "sample"),
            (LlamaBackend, "decode", "backend_decode"),
        ]
        with timed(targets, spent, calls):
            t0 = time.perf_counter()
            tokens = sum(c.n_tokens for c in gen.complete_many(list(prompts)))
            wall = time.perf_counter() - t0
        return {"b": b, **per_step(wall, spent, calls, tokens)}
    finally:
        gen.close()


def instrumented_alone(llm: Any, prompts: Sequence[str], cap: int) -> dict[str, Any]:
    import llama_cpp.llama_cpp as binding

    from llamabatch import SamplingParams
    from llamabatch.measure.one_at_a_time import LlamaLoop
    from llamabatch.measure.records import WorkItem

    greedy = SamplingParams(temperature=0.0)
    items = [WorkItem(k, p, greedy) for k, p in enumerate(prompts)]
    loop = LlamaLoop(llm, cap)  # bench's one at a time: Llama.create_completion per item
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    try:
        with timed([(binding, "llama_decode", "llama_decode")], spent, calls):
            t0 = time.perf_counter()
            tokens = sum(r.n_tokens for r in loop(items, lambda n: None).replies)
            wall = time.perf_counter() - t0
    finally:
        loop.close()
    # llama-cpp-python samples in Python/numpy: everything outside llama_decode
    spent["sample"] = 0.0
    return {"b": 1, "path": "Llama.create_completion", **per_step(wall, spent, calls, tokens)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--workloads", default="S,U,L")
    ap.add_argument(
        "--slots", type=lambda s: tuple(int(v) for v in s.split(",")), default=(1, 4, 8)
    )
    ap.add_argument("--items", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=None, help="default: the workload's")
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--flash-attn", choices=("on", "off"), default="off")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)

    from llamabatch.measure.bench import BenchParams, bench, llama_setup
    from llamabatch.measure.raw import ctx_per_seq
    from llamabatch.measure.workloads import WORKLOADS
    from llamabatch.model import load_llama

    names = [w for w in args.workloads.split(",") if w]
    params = {
        w: BenchParams(
            slots=args.slots,
            parts=("workload",),
            n_batch=args.n_batch,
            workload=w,
            items=args.items,
            workload_rounds=args.rounds,
            max_tokens=args.max_tokens,
        )
        for w in names
    }
    # the Llama's own context holds the longest item alone: L's prompts are short, S's
    # ~540 tokens; replies up to the cap
    n_ctx = ctx_per_seq(700 + max(p.reply_cap for p in params.values()))
    t0 = time.perf_counter()
    llm = load_llama(
        args.model,
        n_ctx=n_ctx,
        n_threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        n_batch=args.n_batch,
        flash_attn=args.flash_attn == "on",
    )
    load_s = time.perf_counter() - t0
    doc: dict[str, Any] = {
        "schema": "llamabatch.gpu.workloads/1",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "load_s": load_s,
        "n_ctx": n_ctx,
        "workloads": {},
    }
    try:
        for w in names:
            p = params[w]
            setup = llama_setup(
                llm, args.model, p, threads=args.threads, n_gpu_layers=args.n_gpu_layers
            )
            result = bench(setup, p, quiet=True)
            work = result["workload"]
            prompts = WORKLOADS[w].prompts(p.items, setup.tokenize, p.seed)
            steps = [instrumented_alone(llm, prompts, p.reply_cap)]
            for b in sorted({b for b in p.slots if b > 1}):
                steps.append(
                    instrumented_batched(setup, b, prompts, work["n_ctx_seq"], p.reply_cap)
                )
            work["per_step"] = steps
            doc["workloads"][w] = {"header": result.get("header"), **work}
            print(
                f"\nper decode step, workload {w} (ms): "
                "step = llama_decode + sample + backend other + engine other"
            )
            for s in steps:
                if s.get("steps"):
                    print(
                        f"  B={s['b']:2d}: {s['steps']:5d} steps, {s['step_ms']:8.3f} = "
                        f"{s['llama_decode_ms']:8.3f} + {s['sample_ms']:7.3f} + "
                        f"{s['backend_other_ms']:7.3f} + {s['engine_other_ms']:7.3f}; "
                        f"Python {s['python_ms']:.3f} ms ({100 * s['python_share']:.1f} %)",
                        flush=True,
                    )
    finally:
        llm.close()
        doc["seconds"] = time.perf_counter() - t0
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
