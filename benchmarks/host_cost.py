#!/usr/bin/env python3
"""Host cost per step at a large vocabulary: llamabatch against llama-server and
llama-batched-bench, on a model whose decode is cheap.

A GPU decodes a step for B sequences in a few milliseconds; what is left per step is
host work: reading B rows of logits, sampling each, and Python. The test model has a
49k vocabulary and, on a CPU, its decode dominates. This script writes a random model
with a tiny body and Llama 3's vocabulary (128,256 tokens, hidden 128, 2 layers:
``benchmarks/gpu/random_gguf.py``, preset ``widevocab``), whose decode is mostly the
output layer, so the host side shows, and measures at each B (``--slots``), greedy and
with llama-cpp-python's default chain (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05):

- ours: ``BatchGenerator(llm, slots=B)`` over B fresh prompts, ``--tokens`` reply tokens
  each (the model never samples its end-of-generation token), tokens/s; the per-step
  split of ``Stats`` (decode, logits, sampling, the rest);
- llama-server ``-np B`` built from the same vendored llama.cpp (``$LLAMA_SERVER``),
  B concurrent ``/completion`` requests with the same chain;
- llama-batched-bench (``$LLAMA_BATCHED_BENCH``): S_TG, decode without sampling (the
  ceiling);
- with ``--backend-sampling``, ours again with ``BatchGenerator(backend_sampling=True)``
  (llama.cpp samples the rows in its graph).

Host time per sequence-step: ours from the split (everything but ``llama_decode``), and
for both ours and llama-server the pass's wall time less its time in decode calls, over
its calls times B (llama-server's from ``decode_clock.c``, preloaded into it as
``benchmarks/vs_llama_server.py`` does).

Rounds alternate their order (:func:`llamabatch.measure.rounds.run_rounds`), prompts
are fresh every round, medians are reported with ours/llama-server per round.

    python benchmarks/host_cost.py --slots 1 4 8 16 --rounds 3 --json host_cost.json
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "gpu"))

from random_gguf import PRESETS, write_random_llama  # noqa: E402
from vs_batched_bench import wheel_lib_dir  # noqa: E402
from vs_llama_server import Server  # noqa: E402

from llamabatch import BatchGenerator, SamplingParams  # noqa: E402
from llamabatch.cli.options import script_parser  # noqa: E402
from llamabatch.measure.report import parse_raw_table  # noqa: E402
from llamabatch.measure.rounds import run_rounds  # noqa: E402
from llamabatch.measure.stats import Spread  # noqa: E402
from llamabatch.model import load_llama  # noqa: E402

BUILD = Path.home() / ".cache/llamabatch/build-0.3.36/bin"
MODEL = Path.home() / ".cache/llamabatch/models/random-widevocab.gguf"
CHAINS: dict[str, dict[str, float]] = {
    "greedy": {"temperature": 0.0},
    "sampled": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
}


def gguf_on_path() -> None:
    """Put llama.cpp's ``gguf`` package (in the unpacked sdist) on ``sys.path``."""
    for src in sorted((Path.home() / ".cache/llamabatch/src").glob("*/vendor/llama.cpp/gguf-py")):
        sys.path.insert(0, str(src))
        return
    sys.exit("llama.cpp's gguf-py not found: run scripts/make-tiny-models once (it unpacks it)")


def model_path(path: Path | None) -> Path:
    if path is not None:
        return path
    if not MODEL.exists():
        gguf_on_path()
        MODEL.parent.mkdir(parents=True, exist_ok=True)
        write_random_llama(MODEL, PRESETS["widevocab"], name="random-widevocab")
    return MODEL


def prompts(rng: random.Random, n: int, chars: int) -> list[str]:
    """``n`` fresh prompts of about ``chars`` tokens (one token per character here)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(chars)) for _ in range(n)]


def batched_bench(binary: Path, model: Path, args: Any) -> dict[int, float]:
    """S_TG of llama-batched-bench at each B (on the wheel's libraries, as ours)."""
    cmd = [str(binary), "-m", str(model), "-t", str(args.threads), "-c",
           str(max(args.slots) * args.n_ctx_seq), "-b", "512", "-ub", "512", "-fa", "off",
           "-npp", str(args.prompt), "-ntg", str(args.tokens),
           "-npl", ",".join(map(str, args.slots))]  # fmt: skip
    env = dict(os.environ, LD_LIBRARY_PATH=str(wheel_lib_dir()))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return {int(r["B"]): r["S_TG t/s"] for r in parse_raw_table(run.stdout + run.stderr)}


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, model=None, n_ctx_seq=256, threads=2, json=None, rounds=3)
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--tokens", type=int, default=64, help="reply tokens per sequence")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens per sequence")
    ap.add_argument("--chains", nargs="+", choices=sorted(CHAINS), default=sorted(CHAINS))
    ap.add_argument("--backend-sampling", action="store_true", help="also ours with it on")
    ap.add_argument(
        "--server", type=Path, default=Path(os.environ.get("LLAMA_SERVER", BUILD / "llama-server"))
    )
    env_bb = os.environ.get("LLAMA_BATCHED_BENCH", BUILD / "llama-batched-bench")
    ap.add_argument("--batched-bench", type=Path,
                    default=Path(env_bb))  # fmt: skip
    args = ap.parse_args(argv)
    model = model_path(Path(args.model) if args.model else None)
    llm = load_llama(str(model), n_ctx=args.n_ctx_seq, n_threads=args.threads)
    kinds = {"ours": False, **({"ours+bs": True} if args.backend_sampling else {})}
    gens = {(k, b): BatchGenerator(llm, slots=b, n_ctx_seq=args.n_ctx_seq,
                                   max_tokens=args.tokens, backend_sampling=on)
            for k, on in kinds.items() for b in args.slots}  # fmt: skip
    logs = Path(tempfile.mkdtemp(prefix="host_cost-"))
    servers = {b: Server(args.server, str(model), b, args.n_ctx_seq, args.threads, 512,
                         logs / f"server-{b}.log", clock=True).__enter__()
               for b in args.slots}  # fmt: skip
    rng = random.Random(0)
    paths: dict[str, Any] = {}
    for b in args.slots:
        for chain in args.chains:
            sampling = SamplingParams(**CHAINS[chain], seed=1, max_tokens=args.tokens)

            def ours(items, tick, gen, sampling=sampling):
                before = gen.stats.step_split
                out = gen.complete_many(items, sampling)
                return sum(c.n_tokens for c in out), (gen.stats.step_split - before).to_json()

            def server(items, tick, srv=servers[b], chain=chain):
                before = srv.decode_totals()
                n = srv.complete_all(list(items), args.tokens, len(items), **CHAINS[chain])
                d = srv.decode_totals() - before
                return n, {"steps": d.calls, "decode_s": d.seconds}

            for k in kinds:
                paths[f"{k} B={b} {chain}"] = functools.partial(ours, gen=gens[k, b])
            paths[f"server B={b} {chain}"] = server
    fresh: dict[tuple[int, int], list[str]] = {}

    def items(r: int, name: str) -> list[str]:
        b = int(name.split("B=")[1].split()[0])
        return fresh.setdefault((r, b), prompts(rng, b, args.prompt))

    try:
        rounds = run_rounds(paths, items, args.rounds, warmup=lambda name: items(-1, name))
        ceiling = [batched_bench(args.batched_bench, model, args) for _ in range(args.rounds)]
    finally:
        for srv in servers.values():
            srv.__exit__()
        for gen in gens.values():
            gen.close()
    rows = []
    for b in args.slots:
        for chain in args.chains:

            def rate(name: str, r) -> float:
                p = r.get(name)
                return p.result[0] / p.seconds

            def host_ms(name: str, b: int = b) -> float | None:
                """Median of wall less decode, per sequence-step (None: items ran alone)."""
                per = [
                    (p.seconds - s["decode_s"]) * 1e3 / (s["steps"] * b)
                    for r in rounds
                    if (s := (p := r.get(name)).result[1]).get("steps")
                ]
                return statistics.median(per) if per else None

            ours_ts = [rate(f"ours B={b} {chain}", r) for r in rounds]
            server_ts = [rate(f"server B={b} {chain}", r) for r in rounds]
            splits = [r.get(f"ours B={b} {chain}").result[1] for r in rounds]
            s_tg = statistics.median(c[b] for c in ceiling)
            split = {k: statistics.median(s.get(k, 0.0) for s in splits) for k in splits[0]}
            n = split.get("steps", 0)  # 0 with one slot: items run alone, unsplit
            per_step = {k: v / n for k, v in split.items() if k.endswith("_s")} if n else {}
            host = per_step and sum(v for k, v in per_step.items() if k != "decode_s") / b
            ours_med, server_med = statistics.median(ours_ts), statistics.median(server_ts)
            row = {
                "B": b,
                "chain": chain,
                "ours_tps": ours_med,
                "server_tps": server_med,
                "ratio": Spread.of([o / s for o, s in zip(ours_ts, server_ts)]).median,
                "ratios": [o / s for o, s in zip(ours_ts, server_ts)],
                "batched_bench_s_tg": s_tg,
                "split": split,
                "per_step_s": per_step,
                "ours_host_ms_per_seq_step": host * 1e3 if host else None,
                "ours_wall_host_ms_per_seq_step": host_ms(f"ours B={b} {chain}"),
                "server_host_ms_per_seq_step": host_ms(f"server B={b} {chain}"),
            }
            if args.backend_sampling:
                bs_ts = [rate(f"ours+bs B={b} {chain}", r) for r in rounds]
                row["ours_bs_tps"] = statistics.median(bs_ts)
                row["bs_ratio"] = Spread.of([o / s for o, s in zip(bs_ts, ours_ts)]).median
                row["bs_rows"] = sum(
                    r.get(f"ours+bs B={b} {chain}").result[1].get("backend_sampled_rows", 0)
                    for r in rounds
                )
            rows.append(row)
    print(
        "| B | chain | ours tok/s | llama-server tok/s | ours / server | S_TG | ours host "
        "ms/seq-step (split) | wall less decode ms/seq-step: ours, server "
        "| backend sampling / host |"
    )
    print("|---|---|---|---|---|---|---|---|---|")

    def ms(v: float | None) -> str:
        return "alone" if v is None else f"{v:.3f}"

    for row in rows:
        print(f"| {row['B']} | {row['chain']} | {row['ours_tps']:.1f} | {row['server_tps']:.1f} "
              f"| {row['ratio']:.2f} | {row['batched_bench_s_tg']:.1f} "
              f"| {ms(row['ours_host_ms_per_seq_step'])} "
              f"| {ms(row['ours_wall_host_ms_per_seq_step'])}, "
              f"{ms(row['server_host_ms_per_seq_step'])} "
              f"| {row.get('bs_ratio', float('nan')):.2f} |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(__import__("json").dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
