"""``llamabatch doctor``: check that llama-cpp-python, llama.cpp and a model work here.

Prints the versions (llamabatch, Python, llama-cpp-python and whether llamabatch
supports it, llama.cpp's build), llama.cpp's system information (CPU features it was
built with, backends, devices with their free memory where the binding reports it, GPU
offload), then runs each check in its own process, so that a crash of llama.cpp is
reported instead of killing the doctor:

  system info        llama.cpp's build and devices
  model load         the model loaded into a llama_cpp.Llama
  decode alone       a 64-token prompt decoded through the Llama
  batch of N slots   a batch context of N sequences on the same model, one lockstep step
  KV bytes per slot  the estimate (llamabatch.llamacpp.kv_size) and what llama.cpp
                     allocated (its log)

One line per check: PASS or FAIL, seconds, and what it found or why it failed. A check
that dies by a signal names the signal; for a known cause (a native build on a CPU that
advertises Intel AMX, in a VM that does not enable the AMX tile state: llama.cpp repacks
the weights for AMX and faults at the first decode) it prints the command that rebuilds
llama-cpp-python without AMX. Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .._util.busy import busy_cpu_warning, load_average
from . import doctor_diagnosis as dx
from . import doctor_steps, options
from .common import EXIT_FAILURE, EXIT_OK, SUMMARIES, UsageError, guarded, usage_error

PROG = "llamabatch doctor"

#: Seconds one check may run before it is stopped and reported as failed.
DEFAULT_TIMEOUT_S = 600.0

#: CPU flags llama.cpp's CPU backend builds variants for, shown when present.
_CPU_FEATURES = (
    "sse3 ssse3 avx avx2 f16c fma avx_vnni avx512f avx512bw avx512vl avx512_vnni "
    "avx512_bf16 amx_tile amx_int8 amx_bf16 neon asimd sve sve2 i8mm"
).split()

#: Last lines of a failed check's log shown under its line.
_LOG_TAIL = 6


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``doctor`` subcommand to the ``llamabatch`` parser."""
    p = options.subcommand(
        subparsers,
        PROG,
        SUMMARIES["doctor"],
        __doc__,
    )
    p.add_argument(
        "--slots",
        type=int,
        default=4,
        metavar="N",
        help="sequences of the batch check, >= 2 (default: %(default)s)",
    )
    p.add_argument(
        "--n-ctx-seq",
        type=int,
        default=4096,
        metavar="N",
        help="tokens per sequence of the batch check, >= 65; also the Llama's context "
        "(default: %(default)s)",
    )
    options.add(p, "--threads", help="CPU threads (default: llama-cpp-python's)")
    options.add(p, "--n-gpu-layers")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds each check may take (default: %(default)s)",
    )
    p.set_defaults(func=run)


@dataclass(slots=True)
class Check:
    """One check's outcome: ``ok``, wall seconds of its process, what it found or why it
    failed, notes printed under its line, its result fields and llama.cpp's log."""

    name: str
    ok: bool
    seconds: float | None
    detail: str
    notes: list[str] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    log: str = ""


def _result_of(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(doctor_steps.RESULT_PREFIX):
            try:
                found = json.loads(line[len(doctor_steps.RESULT_PREFIX) :])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def _tail(log: str) -> list[str]:
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    return lines[-_LOG_TAIL:]


def run_step(step: str, name: str, args: argparse.Namespace, flags: frozenset[str]) -> Check:
    """Run ``step`` of :mod:`llamabatch.cli.doctor_steps` in a fresh interpreter and
    judge how it ended."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            doctor_steps.command(step, args),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=args.timeout,
        )
    except subprocess.TimeoutExpired as exc:
        log = exc.stderr if isinstance(exc.stderr, str) else ""
        return Check(name, False, args.timeout, f"did not finish in {args.timeout:g} s", log=log)
    seconds = time.perf_counter() - start
    result = _result_of(proc.stdout)
    if result is not None and proc.returncode in (0, 1):
        ok = bool(result.get("ok")) and proc.returncode == 0
        notes = [str(n) for n in result.get("notes") or []]
        return Check(name, ok, seconds, str(result.get("detail", "")), notes, result, proc.stderr)
    died = dx.death(proc.returncode)
    check = Check(name, False, seconds, died.text, log=proc.stderr)
    if dx.amx_on_vm(died, proc.stderr, flags):
        check.notes.append(
            "known cause: this CPU advertises Intel AMX (amx_tile) and llama.cpp repacked the "
            "weights for AMX at load; a VM that does not enable the AMX tile state faults on "
            "the first AMX instruction"
        )
        check.notes.append("fix: rebuild llama-cpp-python with AMX code generation off:")
        check.notes.append(
            "  "
            + dx.rebuild_command(sys.executable, _binding_version(), os.environ.get("CMAKE_ARGS"))
        )
    else:
        check.notes += ["last lines of its output:"] + ["  " + t for t in _tail(proc.stderr)]
    return check


def kv_check(batch: Check) -> Check:
    """KV bytes per slot: the estimate against what llama.cpp logged it allocated."""
    name = "KV bytes per slot"
    r = batch.result
    if "estimate_bytes_per_slot" not in r:
        return Check(name, False, None, "no estimate: the batch check did not get that far")
    per_slot = int(r["estimate_bytes_per_slot"])
    text = f"estimate {per_slot / 2**20:.2f} MiB per slot"
    if not r.get("estimate_exact"):
        text += " (an upper bound for this model)"
    logged = dx.allocated_kv(batch.log)
    if logged is None:
        return Check(
            name, batch.ok, None, text + "; llama.cpp's log does not say what it allocated"
        )
    got = logged.bytes / max(logged.seqs, 1)
    text += f", allocated {got / 2**20:.2f} MiB per slot ({logged.seqs} x {logged.cells} cells)"
    tolerance = 0.0051 * 2**20  # the log gives MiB with two decimals (16.875 -> "16.88")
    if r.get("estimate_exact"):
        ok = abs(logged.bytes - int(r["estimate_bytes"])) <= tolerance
    else:
        ok = logged.bytes <= int(r["estimate_bytes"]) + tolerance
    return Check(name, ok, None, text if ok else text + ": they differ")


def _binding_version() -> str | None:
    from .._ffi.version import installed_version

    return installed_version()


def _binding_line() -> str:
    from .._ffi.version import check_version, supported_range
    from ..errors import LibraryError

    version = _binding_version()
    if version is None:
        return "not installed"
    try:
        check_version(version)
    except LibraryError:
        return f"{version} (NOT supported: llamabatch supports {supported_range()})"
    return f"{version} (supported: {supported_range()})"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def header(
    info: dict[str, Any], flags: frozenset[str], model: Path | None
) -> list[tuple[str, str]]:
    """The report's first lines: (label, value) pairs."""
    from .. import __version__

    package = Path(__file__).resolve().parents[1]
    build = ", ".join(
        f"{k} {info[key]}"
        for k, key in (
            ("llama", "llama_version"),
            ("ggml", "ggml_version"),
            ("commit", "ggml_commit"),
        )
        if info.get(key)
    )
    shown = [f for f in _CPU_FEATURES if f in flags or (f == "sse3" and "pni" in flags)]
    rows = [
        ("llamabatch", f"{__version__} ({package})"),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("llama-cpp-python", _binding_line()),
        ("llama.cpp", build or "unknown (the system info check failed)"),
        ("system info", info.get("system_info") or "unknown"),
        (
            "CPU flags",
            (" ".join(shown) or "none of the ones llama.cpp uses, or unknown")
            + f" (AMX advertised: {'yes' if dx.has_amx(flags) else 'no'})",
        ),
    ]
    load, cores = load_average(), os.cpu_count()
    if load is not None:
        rows.append(("CPU load", f"{load:.1f} (1-minute average) on {cores} cores"))
    offload = info.get("gpu_offload")
    rows.append(("GPU offload", "unknown" if offload is None else ("yes" if offload else "no")))
    for d in info.get("devices") or []:
        memory = ""
        if d.get("memory_total") or d.get("memory_free"):
            memory = f", free {_gib(d.get('memory_free'))} of {_gib(d.get('memory_total'))}"
        rows.append(("device", f"{d['name']}: {d['description']} ({d['type']}){memory}"))
    if model is not None:
        rows.append(("model", f"{model} ({model.stat().st_size / 2**20:.1f} MiB)"))
    return rows


def print_check(check: Check, out: TextIO) -> None:
    """``PASS  name  1.2 s  detail``, then its notes indented."""
    seconds = "" if check.seconds is None else f"{check.seconds:.1f} s"
    status = "PASS" if check.ok else "FAIL"
    print(f"{status}  {check.name:<20} {seconds:>8}  {check.detail}", file=out, flush=True)
    for note in check.notes:
        print(f"      {note}", file=out, flush=True)


def _check_args(args: argparse.Namespace) -> None:
    if args.slots < 2:
        raise UsageError(f"--slots {args.slots} is out of range: valid is an integer >= 2")
    if args.n_ctx_seq <= doctor_steps.DECODE_TOKENS:
        raise UsageError(
            f"--n-ctx-seq {args.n_ctx_seq} is out of range: valid is an integer > "
            f"{doctor_steps.DECODE_TOKENS} (the decode check's prompt)"
        )
    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout:g} is out of range: valid is > 0 seconds")
    options.check_threads(args.threads)


def _model(args: argparse.Namespace) -> tuple[Path | None, Check | None]:
    from ..errors import ModelError
    from .llm import model_path

    try:
        return model_path(args.model, quiet=False), None
    except ModelError as exc:
        return None, Check("model file", False, None, str(exc))


def _work(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
    except ValueError as exc:
        raise usage_error(exc, args) from None
    out = sys.stdout
    flags = dx.cpu_flags()
    model, missing = _model(args)
    args.model = model
    info_check = run_step("sysinfo", "system info", args, flags)
    for label, value in header(info_check.result, flags, model):
        print(f"{label:<17} {value}", file=out)
    print(file=out, flush=True)
    checks = [info_check]
    print_check(info_check, out)
    if missing is not None:
        checks.append(missing)
        print_check(missing, out)
    else:
        for step, name in (
            ("load", "model load"),
            ("decode", "decode alone"),
            ("batch", f"batch of {args.slots} slots"),
        ):
            checks.append(run_step(step, name, args, flags))
            print_check(checks[-1], out)
        checks.append(kv_check(checks[-1]))
        print_check(checks[-1], out)
        checks.append(run_step("agree", "batched = alone", args, flags))
        print_check(checks[-1], out)
    busy = busy_cpu_warning(load_average(), os.cpu_count(), args.threads)
    if busy is not None:  # its decode timings above are then not this machine's own
        print(f"{PROG}: warning: {busy}", file=out, flush=True)
    passed = sum(c.ok for c in checks)
    print(f"{PROG}: {passed} of {len(checks)} checks passed", file=out, flush=True)
    return EXIT_OK if passed == len(checks) else EXIT_FAILURE


def run(args: argparse.Namespace) -> int:
    """Run the checks; 0 when all passed, 1 otherwise, 2 for bad usage."""
    return guarded(PROG, _work, args, "interrupted")
