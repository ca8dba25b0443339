"""The steps of ``llamabatch doctor``, each run in its own process so that a crash of
llama.cpp (a signal) is reported by the parent instead of killing it.

Run as ``python -m llamabatch.cli.doctor_steps STEP [options]``; the last line on
standard output is ``DOCTOR-RESULT {json}``: ``{"ok": bool, "detail": str, ...}`` plus
step-specific fields. llama.cpp's own log goes to standard error (the model is loaded
with ``verbose=True``), where the parent looks for known causes and the KV cache size.

Steps:

- ``sysinfo``: llama.cpp's build and system information (:mod:`llamabatch._ffi.sysinfo`);
- ``load``: load the model into a ``llama_cpp.Llama``;
- ``decode``: one decode of a prompt of :data:`DECODE_TOKENS` tokens alone, through the
  ``Llama``;
- ``batch``: a batch context of ``--slots`` sequences of ``--n-ctx-seq`` tokens on the
  same model and one lockstep decode step of every sequence (each prompt is prefilled,
  its first token sampled, then all sequences decode their second token together); with
  the KV cache estimate of :mod:`llamabatch.llamacpp.kv_size`;
- ``agree``: on a batch context of ``--slots`` sequences, a mixed step (one prompt
  prefilled beside the other sequences' reply steps) compared with the same tokens one
  sequence at a time (:mod:`llamabatch.engine.device_check`), on the device the model's
  logits come from.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.device_check import DeviceCheck

#: Prompt tokens of the ``decode`` step.
DECODE_TOKENS = 64

#: Prefix of the line that carries a step's result.
RESULT_PREFIX = "DOCTOR-RESULT "

STEPS = ("sysinfo", "load", "decode", "batch", "agree")


def _load(args: argparse.Namespace) -> Any:
    from ..model import load_llama

    return load_llama(
        args.model,
        n_ctx=args.n_ctx_seq,
        n_threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        verbose=True,
    )


def step_sysinfo(args: argparse.Namespace) -> dict[str, Any]:
    """llama.cpp's versions, ``llama_print_system_info()``, devices, GPU offload."""
    from .._ffi import sysinfo

    info = sysinfo.system_info()
    return {
        "ok": info is not None,
        "detail": "llama_print_system_info() answered" if info else "no system info",
        "system_info": info,
        "llama_version": sysinfo.llama_version(),
        "ggml_version": sysinfo.ggml_version(),
        "ggml_commit": sysinfo.ggml_commit(),
        "gpu_offload": sysinfo.supports_gpu_offload(),
        "devices": [
            {
                "name": d.name,
                "description": d.description,
                "type": d.type,
                "memory_total": d.memory_total,
                "memory_free": d.memory_free,
            }
            for d in sysinfo.devices()
        ],
    }


def step_load(args: argparse.Namespace) -> dict[str, Any]:
    """Load the model; report its vocabulary and context sizes."""
    llm = _load(args)
    try:
        n_vocab, n_ctx = llm.n_vocab(), llm.n_ctx()
    finally:
        llm.close()
    return {"ok": True, "detail": f"n_vocab {n_vocab}, n_ctx {n_ctx}"}


def _prompt_tokens(llm: Any, n: int, salt: str = "") -> list[int]:
    """The first ``n`` token ids of plain English text (with BOS where the model adds one)."""
    text = f"{salt}The quick brown fox jumps over the lazy dog while the cat sleeps. "
    tokens: list[int] = []
    repeat = 1
    while len(tokens) < n:
        tokens = list(llm.tokenize((text * repeat).encode("utf-8"), add_bos=True))
        repeat *= 2
    return tokens[:n]


def step_decode(args: argparse.Namespace) -> dict[str, Any]:
    """Decode a :data:`DECODE_TOKENS`-token prompt alone and sample one token (greedy)."""
    llm = _load(args)
    try:
        tokens = _prompt_tokens(llm, DECODE_TOKENS)
        out = llm.create_completion(tokens, max_tokens=1, temperature=0.0)
    finally:
        llm.close()
    n_prompt = out["usage"]["prompt_tokens"]
    return {
        "ok": n_prompt == len(tokens),
        "detail": f"{n_prompt} prompt tokens decoded, 1 token sampled",
    }


def step_batch(args: argparse.Namespace) -> dict[str, Any]:
    """A batch context of ``--slots`` sequences and one lockstep decode step."""
    from .. import BatchGenerator, SamplingParams

    llm = _load(args)
    try:
        estimate = BatchGenerator.estimate_memory(llm, slots=args.slots, n_ctx_seq=args.n_ctx_seq)
        prompts = [_prompt_tokens(llm, 16, salt=f"Item {i}. ") for i in range(args.slots)]
        with BatchGenerator(
            llm,
            slots=args.slots,
            n_ctx_seq=args.n_ctx_seq,
            max_tokens=2,
            sampling=SamplingParams(temperature=0.0),
        ) as gen:
            results = gen.complete_many(prompts)
            stats, limits = gen.stats, gen.limits
    finally:
        llm.close()
    failed = [c.error for c in results if not c.ok]
    alone = sum(c.path != "batch" for c in results)
    ok = not failed and alone == 0 and stats.batch_disabled_reason is None
    if ok and limits is not None:
        detail = (
            f"{limits.n_seq_max} sequences x {limits.n_ctx_seq} tokens, n_batch "
            f"{limits.n_batch}; {len(results)} prompts prefilled, one decode step of all"
        )
    else:
        detail = (
            stats.batch_disabled_reason
            or (failed[0] if failed else None)
            or f"{alone} of {len(results)} items were completed alone"
        )
    return {
        "ok": ok,
        "detail": detail,
        "n_seq_max": limits.n_seq_max if limits else None,
        "n_ctx_seq": limits.n_ctx_seq if limits else None,
        "estimate_bytes_per_slot": estimate.bytes_per_slot,
        "estimate_bytes": estimate.total_bytes,
        "estimate_exact": estimate.exact,
    }


#: What to try when a device fails the ``agree`` step, printed under it.
AGREE_HINTS = (
    "batched replies on this device would differ from one-at-a-time ones; the library "
    "checks this itself and completes items alone here (check_device)",
    "try: flash attention on or off (Llama(flash_attn=...)), fewer --slots, another "
    "llama.cpp backend or GPU driver, or --slots 1 (one at a time)",
)


def step_agree(args: argparse.Namespace) -> dict[str, Any]:
    """Batched equals alone on the device (:func:`~llamabatch.engine.device_check.check_device`)."""
    from .._ffi import output_device
    from ..engine.device_check import check_device, probe_n_batch
    from ..llamacpp.backend import LlamaBackend

    llm = _load(args)
    try:
        device = output_device(llm)
        backend = LlamaBackend(llm, backend_sampling=False)
        try:
            limits = backend.open(args.slots, args.n_ctx_seq, probe_n_batch(args.slots, 512))
            check = check_device(backend, limits)
        finally:
            backend.close()
    finally:
        llm.close()
    where = device or "CPU"
    return {
        "ok": check.ok,
        "detail": check.describe(device),
        "device": where,
        "deviation": check.deviation,
        "tolerance": check.tolerance,
        "failed_step": None if check.failed is None else check.failed.name,
        "notes": [] if check.ok else _agree_notes(check, where),
    }


def _agree_notes(check: DeviceCheck, where: str) -> list[str]:
    """What to print under a failed ``agree`` step: the step that failed, the public
    report it matches and what to try."""
    notes = [f"device {where}: " + AGREE_HINTS[0]]
    step = check.failed
    if step is not None:  # the detail names it and its reports
        notes.append(f"try: {step.remedy}, or --slots 1 (one at a time)")
    else:
        notes.append(AGREE_HINTS[1])
    return notes


_RUN: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "sysinfo": step_sysinfo,
    "load": step_load,
    "decode": step_decode,
    "batch": step_batch,
    "agree": step_agree,
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The worker's arguments (the parent passes them; see :func:`command`)."""
    p = argparse.ArgumentParser(prog="python -m llamabatch.cli.doctor_steps")
    p.add_argument("step", choices=STEPS)
    p.add_argument("--model", type=Path)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--n-ctx-seq", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n-gpu-layers", type=int, default=-1)
    return p.parse_args(argv)


def command(step: str, args: argparse.Namespace) -> list[str]:
    """The argv that runs ``step`` with the doctor's ``args`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "llamabatch.cli.doctor_steps", step]
    if args.model is not None:
        cmd += ["--model", str(args.model)]
    cmd += ["--slots", str(args.slots), "--n-ctx-seq", str(args.n_ctx_seq)]
    cmd += ["--n-gpu-layers", str(args.n_gpu_layers)]
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    return cmd


def main(argv: list[str] | None = None) -> int:
    """Run one step; print its result line; 0 when it passed, 1 when it failed."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = _RUN[args.step](args)
    except Exception as exc:  # the step's failure is its result, reported by the parent
        message = exc.args[0] if len(exc.args) == 1 else str(exc)  # without a hint
        result = {"ok": False, "detail": f"{type(exc).__name__}: {message}"}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
