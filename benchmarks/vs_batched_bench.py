#!/usr/bin/env python3
"""Our raw bench side by side with llama.cpp's own ``llama-batched-bench``.

Runs llama.cpp's C++ ``llama-batched-bench`` and llamabatch's raw bench
(:func:`llamabatch.measure.raw.run_raw` through ``LlamaBackend``: ``BatchContext`` +
``LlamaBatch`` + ``SeqSampler``) on the same model, threads, flash-attention setting and
sizes, alternately (the rounds of :func:`llamabatch.measure.rounds.run_rounds`): each
round measures every B with the C tool and ours back to back (C first in odd rounds, ours
first in even ones), so drift of a shared machine hits both alike. It prints our S_PP
and S_TG as a ratio of its, per B: of the medians over rounds, of the best runs (the
least disturbed ones), and per round. Target: >= 0.97 at every B.

The C tool comes from ``$LLAMA_BATCHED_BENCH`` (a prebuilt binary), or is built from the
llama.cpp sources that the installed llama-cpp-python was built from (``--llama-cpp-src``
or ``$LLAMA_CPP_SRC``; e.g. the ``vendor/llama.cpp`` of the unpacked sdist)::

    cmake -B BUILD -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release
    cmake --build BUILD --target llama-batched-bench -j2      # several minutes

By default (``--libs wheel``) the C tool runs on the shared libraries shipped in the
llama-cpp-python wheel (``LD_LIBRARY_PATH``), so both sides run the very same compute
code and the ratio measures only what our Python path adds; ``--libs build`` uses the
libraries built with it.

``llama-batched-bench`` only decodes; our path also samples one token per sequence per
step (a sampler chain each). A last instrumented run of ours splits T_TG into
``llama_decode``, sampling, the numpy batch fill, and the Python around them, so the
comparison is honest about where any gap comes from. ``--profile`` adds a cProfile of
one round.

Example::

    LLAMA_CPP_SRC=/path/to/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        python benchmarks/vs_batched_bench.py --rounds 3 --json vs.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from llamabatch.cli.options import script_parser
from llamabatch.measure.raw import RAW_COLUMNS, ctx_per_seq, run_raw
from llamabatch.measure.report import parse_raw_table
from llamabatch.measure.rounds import Pass, order, run_rounds

BIN_NAME = "llama-batched-bench"


# -- the C tool ----------------------------------------------------------------------------
def build_batched_bench(src: Path, build: Path, jobs: int) -> Path:
    """Configure and build ``llama-batched-bench`` in ``build``; return the binary."""
    binary = build / "bin" / BIN_NAME
    if binary.is_file():
        return binary
    if not (src / "CMakeLists.txt").is_file():
        sys.exit(f"not a llama.cpp source tree (no CMakeLists.txt): {src}")
    if shutil.which("cmake") is None:
        sys.exit(
            "cmake not found: install cmake and a C++ compiler, or set "
            "LLAMA_BATCHED_BENCH to a prebuilt llama-batched-bench"
        )
    print(f"building {BIN_NAME} in {build} (several minutes) ...", file=sys.stderr)
    subprocess.run(
        [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build),
            "-DLLAMA_CURL=OFF",
            "-DGGML_NATIVE=ON",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        check=True,
    )
    subprocess.run(
        ["cmake", "--build", str(build), "--target", BIN_NAME, "-j", str(jobs)], check=True
    )
    return binary


def find_binary(args: argparse.Namespace) -> Path:
    env = os.environ.get("LLAMA_BATCHED_BENCH")
    if env:
        return Path(env)
    src = args.llama_cpp_src or os.environ.get("LLAMA_CPP_SRC")
    if not src:
        sys.exit(
            "give --llama-cpp-src (or LLAMA_CPP_SRC) with the llama.cpp sources of the "
            "installed llama-cpp-python, or LLAMA_BATCHED_BENCH with a built binary"
        )
    src = Path(src)
    build = Path(args.build_dir) if args.build_dir else src / "build"
    return build_batched_bench(src, build, args.jobs)


def wheel_lib_dir() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


def run_c(binary: Path, args: argparse.Namespace) -> tuple[list[dict[str, float]], str]:
    """One run of the C tool; its table rows and its whole output."""
    # the same KV cache as ours: n_seq_max = B sequences of PP+TG tokens padded to 256
    n_ctx = max(args.slots) * ctx_per_seq(args.prompt_tokens + args.gen_tokens)
    cmd = [
        str(binary),
        "-m",
        str(args.model),
        "-t",
        str(args.threads),
        "-c",
        str(n_ctx),
        "-b",
        str(args.n_batch),
        "-ub",
        str(args.n_batch),
        "-fa",
        args.flash_attn,
        "-npp",
        str(args.prompt_tokens),
        "-ntg",
        str(args.gen_tokens),
        "-npl",
        ",".join(map(str, args.slots)),
        "-ngl",
        str(args.n_gpu_layers),
    ]
    env = dict(os.environ)
    if args.libs == "wheel":
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(wheel_lib_dir()), env.get("LD_LIBRARY_PATH")) if p
        )
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    text = run.stdout + run.stderr
    if run.returncode != 0:
        sys.exit(f"{BIN_NAME} failed ({run.returncode}):\n{' '.join(cmd)}\n{text[-3000:]}")
    rows = parse_raw_table(text)
    if [int(r["B"]) for r in rows] != list(args.slots):
        sys.exit(f"could not read {BIN_NAME}'s table:\n{text[-3000:]}")
    return rows, text


# -- ours ----------------------------------------------------------------------------------
def load_llm(args: argparse.Namespace) -> Any:
    from llamabatch.model import load_llama

    return load_llama(
        args.model,
        n_ctx=512,
        n_threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        flash_attn=args.flash_attn == "on",
    )


def run_ours(llm: Any, args: argparse.Namespace, clock=time.perf_counter):
    from llamabatch.llamacpp.backend import LlamaBackend

    backend = LlamaBackend(llm)  # a fresh context per run, as the C tool has
    try:
        rows, _ = run_raw(
            backend,
            args.slots,
            args.prompt_tokens,
            args.gen_tokens,
            rounds=1,
            n_batch=args.n_batch,
            seed=args.seed,
            clock=clock,
        )
    finally:
        backend.close()
    return rows


class PhaseClock:
    """A perf_counter that knows where run_raw is: it reads the clock at PP start, TG
    start and end of the warm-up, then of each B in turn (rounds=1), so the k-th B's
    phases follow the warm-up's three reads."""

    WARM_UP_READS = 3

    def __init__(self) -> None:
        self.calls, self.phase = 0, None

    def __call__(self) -> float:
        n = self.calls - self.WARM_UP_READS
        self.calls += 1
        if n < 0:
            self.phase = None
        else:
            k, i = divmod(n, 3)
            self.phase = None if i == 2 else (k, ("pp", "tg")[i])
        return time.perf_counter()


@contextlib.contextmanager
def instrumented(clock: PhaseClock, spent: dict):
    """Time, per phase: ``llama_decode`` itself (``_ffi.Library.decode``, the ctypes
    call), ``llama_sampler_sample`` (``_ffi.SamplerChains.sample``) and the numpy batch
    fill (``LlamaBatch.add_run``). The wrappers cost well under a microsecond per call."""
    from llamabatch._ffi.library import Library
    from llamabatch._ffi.sampling import SamplerChains
    from llamabatch.llamacpp.batch import LlamaBatch

    originals = {
        (Library, "decode"): Library.decode,
        (SamplerChains, "sample"): SamplerChains.sample,
        (LlamaBatch, "add_run"): LlamaBatch.add_run,
    }

    def wrap(name, fn):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if clock.phase is not None:
                    spent[(clock.phase, name)] += time.perf_counter() - t

        return timed

    for (cls, attr), fn in originals.items():
        setattr(cls, attr, wrap(attr, fn))
    try:
        yield
    finally:
        for (cls, attr), fn in originals.items():
            setattr(cls, attr, fn)


def breakdown(llm: Any, args: argparse.Namespace) -> dict[int, dict[str, float]]:
    """Per B, where T_PP and T_TG go in one instrumented run of ours (seconds)."""
    clock, spent = PhaseClock(), defaultdict(float)
    with instrumented(clock, spent):
        rows = run_ours(llm, args, clock)
    out = {}
    for k, row in enumerate(rows):
        p = out[row.b] = {"t_pp": row.t_pp, "t_tg": row.t_tg}
        for phase, total in (("pp", row.t_pp), ("tg", row.t_tg)):
            for name in ("decode", "sample", "add_run"):
                p[f"{phase}_{name}"] = spent[((k, phase), name)]
            p[f"{phase}_python"] = total - sum(
                spent[((k, phase), n)] for n in ("decode", "sample", "add_run")
            )
    return out


def profile(llm: Any, args: argparse.Namespace, path: str | None) -> str:
    prof = cProfile.Profile()
    prof.enable()
    run_ours(llm, args)
    prof.disable()
    if path:
        prof.dump_stats(path)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
    return s.getvalue()


# -- report --------------------------------------------------------------------------------
def speeds(row: dict[str, float]) -> tuple[float, float]:
    """(S_PP, S_TG) of a table row, recomputed from its times (more digits than printed)."""
    return row["B"] * row["PP"] / row["T_PP s"], row["B"] * row["TG"] / row["T_TG s"]


def as_table_row(row) -> dict[str, float]:
    """Our row keyed as a parsed row of the C tool's table (``parse_raw_table``)."""
    return dict(zip(RAW_COLUMNS, row.values()))


def summarize(pairs: list[tuple[dict, dict]]) -> dict[str, Any]:
    """Ratios ours/C of one B from its (C row, our row) pairs, one pair per round."""
    c = [speeds(cr) for cr, _ in pairs]
    o = [speeds(orow) for _, orow in pairs]
    med = lambda xs: statistics.median(xs)  # noqa: E731
    out: dict[str, Any] = {}
    for k, name in ((0, "pp"), (1, "tg")):
        cs, os_ = [x[k] for x in c], [x[k] for x in o]
        paired = [a / b for a, b in zip(os_, cs)]
        out[name] = {
            "c_median": med(cs),
            "ours_median": med(os_),
            "ratio_of_medians": med(os_) / med(cs),
            "ratio_best": max(os_) / max(cs),
            "paired": paired,
            "paired_median": med(paired),
            "c_all": cs,
            "ours_all": os_,
        }
    return out


def report(args, results: dict[int, dict], parts: dict[int, dict]) -> str:
    lines = [
        "|    B | C S_PP | our S_PP | PP ratio | PP best | C S_TG | our S_TG | TG ratio "
        "| TG best | TG paired min-max | sample %TG | other %TG |",
        "|------|--------|----------|----------|---------|--------|----------|----------"
        "|---------|-------------------|------------|-----------|",
    ]
    for b in args.slots:
        pp, tg = results[b]["pp"], results[b]["tg"]
        p = parts.get(b, {})
        t_tg = p.get("t_tg") or float("nan")
        sample = 100 * p.get("tg_sample", float("nan")) / t_tg
        other = 100 * (p.get("tg_python", float("nan")) + p.get("tg_add_run", 0.0)) / t_tg
        lines.append(
            f"| {b:4d} | {pp['c_median']:6.1f} | {pp['ours_median']:8.1f} | "
            f"{pp['ratio_of_medians']:8.3f} | {pp['ratio_best']:7.3f} | "
            f"{tg['c_median']:6.1f} | {tg['ours_median']:8.1f} | "
            f"{tg['ratio_of_medians']:8.3f} | {tg['ratio_best']:7.3f} | "
            f"{min(tg['paired']):8.3f}-{max(tg['paired']):<8.3f} | {sample:10.2f} | "
            f"{other:9.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, model=None, n_batch=512, threads=2, seed=0, json=None)
    ap.add_argument(
        "--llama-cpp-src",
        default=None,
        help="llama.cpp sources to build llama-batched-bench from (default: $LLAMA_CPP_SRC)",
    )
    ap.add_argument("--build-dir", default=None, help="cmake build directory (default: SRC/build)")
    ap.add_argument("--jobs", type=int, default=2, help="build jobs (default: 2)")
    for flag, choices, text in (
        (
            "--libs",
            ("wheel", "build"),
            "shared libraries the C tool runs on (default: the wheel's)",
        ),
        ("--flash-attn", ("off", "on"), "both sides (default: off, as llama-cpp-python's Llama)"),
    ):
        ap.add_argument(flag, choices=choices, default=choices[0], help=text)
    ap.add_argument(
        "--slots", type=lambda s: tuple(int(v) for v in s.split(",")), default=(1, 2, 4, 8)
    )
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="C/ours pairs per B (default: 3); each round measures every B, "
        "C and ours back to back, C first in odd rounds, ours first in even",
    )
    ap.add_argument(
        "--profile",
        nargs="?",
        const="",
        default=None,
        metavar="OUT.prof",
        help="also cProfile one sweep of ours (and dump it to OUT.prof)",
    )
    args = ap.parse_args(argv)
    if args.model is None:
        from llamabatch.model import default_model_path

        args.model = default_model_path()
    binary = find_binary(args)
    llm = load_llm(args)
    print(
        f"model {args.model}, threads {args.threads}, n_batch = n_ubatch = {args.n_batch}, "
        f"flash_attn {args.flash_attn}, PP {args.prompt_tokens}, TG {args.gen_tokens}, "
        f"B {','.join(map(str, args.slots))}; C tool {binary} on the {args.libs}'s "
        "libraries",
        flush=True,
    )
    c_texts: list[str] = []
    t0 = time.perf_counter()

    def c_side(items, tick) -> dict[str, float]:
        (row,), text = run_c(binary, items[0])
        c_texts.append(text)
        return row

    def ours(items, tick) -> dict[str, float]:
        (row,) = run_ours(llm, items[0])
        return as_table_row(row)

    def heard(r: int, p: Pass) -> None:
        if p.path == order(list(paths), r)[-1]:
            print(
                f"round {r + 1}/{args.rounds} done ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    # per B the C tool and ours back to back, C first in odd rounds, ours first in even
    paths = {f"{side} {b}": fn for b in args.slots for side, fn in (("c", c_side), ("ours", ours))}
    done = run_rounds(
        paths,
        lambda r, name: [argparse.Namespace(**{**vars(args), "slots": (int(name.split()[1]),)})],
        args.rounds,
        on_pass=heard,
    )
    pairs = {
        b: [(r.get(f"c {b}").result, r.get(f"ours {b}").result) for r in done] for b in args.slots
    }
    results = {b: summarize(pairs[b]) for b in args.slots}
    parts = {}
    for b in args.slots:
        parts.update(breakdown(llm, argparse.Namespace(**{**vars(args), "slots": (b,)})))
    print(
        f"\nours / llama-batched-bench, {args.rounds} rounds (target >= 0.97): ratio = of "
        "the medians; best = of the best runs; paired = per round, C and ours back to back."
        "\nsample/other %TG: share of our T_TG in llama_sampler_sample / in neither it nor "
        "llama_decode (one instrumented run)"
    )
    print(report(args, results, parts))
    print(
        "\nbreakdown of our T_TG (s): llama_decode + llama_sampler_sample + batch fill + "
        "other Python (span building, checks, the bench loop)"
    )
    for b, p in parts.items():
        print(
            f"  B={b}: T_TG {p['t_tg']:.3f} = {p['tg_decode']:.3f} + {p['tg_sample']:.4f}"
            f" + {p['tg_add_run']:.4f} + {p['tg_python']:.4f}; T_PP {p['t_pp']:.3f} = "
            f"decode {p['pp_decode']:.3f} + sample {p['pp_sample']:.4f} + other "
            f"{p['pp_python'] + p['pp_add_run']:.4f}"
        )
    if args.profile is not None:
        prof_text = profile(llm, args, args.profile or None)
        print("\ncProfile of one sweep of ours (by own time):\n" + prof_text)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {
                        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    },
                    "results": results,
                    "breakdown_s": parts,
                    "pairs": {b: [{"c": c, "ours": o} for c, o in v] for b, v in pairs.items()},
                    "c_output_last": c_texts[-1] if c_texts else "",
                },
                indent=2,
            )
            + "\n"
        )
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
