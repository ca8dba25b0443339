"""Side by side: one at a time (``Llama.create_completion``), ``BatchGenerator`` (the slot
engine) and llama.cpp's own ``llama-server``, on the named workloads
(llamabatch/measure/workloads.py).

For each B (slots), one ``llama-server`` is started on 127.0.0.1 with the same model,
threads, n_batch, slots and per-slot context as llamabatch::

    llama-server -m MODEL -np B --no-kv-unified -c B*N_CTX_SEQ -t T -b 512 -ub 512 -fa off

and fed by B concurrent clients posting ``/completion`` with ``cache_prompt: true``.
The rounds are llamabatch's own (:func:`llamabatch.measure.rounds.run_rounds`): each
round makes FRESH prompts (a new seed; the S system prompt stays the same, as in a real
backlog) so no path replays a cached prompt, and runs every workload's three paths, in an
order that alternates from round to round. Greedy everywhere. Per (B, workload) it
prints the median seconds per item of each path and the medians of the per-round ratios
llamabatch / one-at-a-time and llamabatch / server, and writes everything to JSON.
``--paths batch server`` leaves out one at a time (half of a run's time).

The decode split: llamabatch's time in ``llama_decode`` comes from its step split
(``BatchGenerator.stats``); llama-server's from ``decode_clock.c`` (next to this script,
built with gcc into the cache folder and preloaded into the server; ``--no-decode-clock``
leaves it out), which counts its decode calls, their time and tokens. Per round this gives
each batcher's host time per item (wall less decode) and the **floor**: the server's
decode time over its wall time, the ratio to llama-server that a batcher making the same
decode calls with no host time at all would reach. Where llamabatch makes the server's
calls (the table's calls column), a target below the floor is out of reach of any batcher
on that machine; "llamabatch at equal decode" is its host time plus the server's decode
time, over the server's wall: the ratio without the difference in speed of the same calls
between two passes minutes apart.

The server binary: ``$LLAMA_SERVER``, else ``~/.cache/llamabatch/build-0.3.36/bin/
llama-server``. To build it from the sdist of the installed llama-cpp-python
(``pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36``, unpacked)::

    cmake -S <sdist>/vendor/llama.cpp -B BUILD -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release
    cmake --build BUILD --target llama-server -j2

The server is stopped by this script whatever happens (terminate, then kill after
10 s; SIGTERM to this script unwinds like Ctrl-C); every wait is bounded. Each B, each
workload can be run on its own (``--slots 4 --workloads S``) and the JSON files merged.

Usage::

    python benchmarks/vs_llama_server.py --slots 4 8 --rounds 3 --json vs_server.json
    python benchmarks/vs_llama_server.py --slots 8 --paths batch server --rounds 8
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import queue
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llamabatch import BatchGenerator, SamplingParams, Stats
from llamabatch.cli.options import script_parser
from llamabatch.measure.one_at_a_time import LlamaLoop
from llamabatch.measure.records import WorkItem
from llamabatch.measure.rounds import Pass, Round, run_rounds
from llamabatch.measure.stats import paired, per_round
from llamabatch.measure.workloads import WORKLOADS
from llamabatch.model import default_model_path, load_llama

DEFAULT_SERVER = Path.home() / ".cache/llamabatch/build-0.3.36/bin/llama-server"
PATHS = ("one", "batch", "server")
CLOCK_SOURCE = Path(__file__).with_name("decode_clock.c")


@dataclass(frozen=True)
class DecodeTotals:
    """Decode calls, the seconds spent in them and the tokens they computed (``b - a``:
    between two readings)."""

    calls: int = 0
    seconds: float = 0.0
    tokens: int = 0

    def __sub__(self, before: DecodeTotals) -> DecodeTotals:
        return DecodeTotals(
            self.calls - before.calls, self.seconds - before.seconds, self.tokens - before.tokens
        )


def engine_decode_totals(stats: Stats) -> DecodeTotals:
    """The batch context's totals from ``BatchGenerator.stats`` (tokens: the prompt
    tokens prefilled and the reply tokens)."""
    return DecodeTotals(
        stats.decode_calls,
        stats.decode_seconds,
        stats.prompt_tokens_prefilled + stats.generated_tokens,
    )


def decode_clock_library(out: Path | None = None) -> Path:
    """``decode_clock.c`` (next to this script) built with gcc at ``out`` (default: in the
    cache folder), once per change of the source; ``RuntimeError`` with the compiler's
    output if it fails."""
    out = out or Path.home() / ".cache/llamabatch/decode_clock.so"
    if out.is_file() and out.stat().st_mtime >= CLOCK_SOURCE.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["gcc", "-O2", "-shared", "-fPIC", "-o", str(out), str(CLOCK_SOURCE), "-ldl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: sh -c script: start "$@" in the background, wait until stdin reaches end of file (the
#: benchmark ended or died), then stop it (SIGTERM, SIGKILL after 5 s).
_WATCH = (
    '"$@" <&- & pid=$!; cat >/dev/null; kill $pid 2>/dev/null; '
    "for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 $pid 2>/dev/null || exit 0; "
    "sleep 0.5; done; kill -9 $pid 2>/dev/null; wait $pid"
)


class Server:
    """A llama-server child process on 127.0.0.1 (a context manager that stops it)."""

    def __init__(
        self,
        binary: Path,
        model: str,
        slots: int,
        n_ctx_seq: int,
        threads: int,
        n_batch: int,
        log: Path,
        clock: bool = False,
    ) -> None:
        """``clock``: run the server with ``decode_clock`` preloaded, so that
        :meth:`decode_totals` reads its decode calls, their time and tokens."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [
            str(binary),
            "-m",
            model,
            "-np",
            str(slots),
            "--no-kv-unified",
            "-c",
            str(slots * n_ctx_seq),
            "-t",
            str(threads),
            "-b",
            str(n_batch),
            "-ub",
            str(n_batch),
            "-fa",
            "off",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.log = log
        self.clock = clock
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self._log = open(self.log, "w")
        env = None
        if self.clock:
            with tempfile.NamedTemporaryFile(prefix="decode-clock-", delete=False) as f:
                f.write(bytes(24))
            self._clock_file = Path(f.name)
            env = {
                **os.environ,
                "LD_PRELOAD": str(decode_clock_library()),
                "LLAMABATCH_DECODE_CLOCK": f.name,
            }
        # The server runs under a small shell that kills it when our end of its stdin
        # closes, which the kernel does whenever this process ends (even by SIGKILL):
        # no llama-server outlives the benchmark.
        self.proc = subprocess.Popen(
            ["sh", "-c", _WATCH, "sh", *self.cmd],
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self.proc.returncode}; see {self.log}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"llama-server did not become healthy in 180 s; see {self.log}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()  # the watching shell stops the server
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        if self.clock:
            self._clock_file.unlink(missing_ok=True)

    def decode_totals(self) -> DecodeTotals:
        """The server's decode totals so far (read while it is idle); the server must have
        been started with ``clock=True``."""
        calls, ns, tokens = struct.unpack("=3Q", self._clock_file.read_bytes()[:24])
        return DecodeTotals(calls, ns / 1e9, tokens)

    def complete(self, prompt: str, max_tokens: int, **sampling: float) -> int:
        """One ``/completion``: greedy unless ``sampling`` gives the chain's fields
        (``temperature``, ``top_k``, ...); the reply's tokens."""
        body = json.dumps(
            {
                "prompt": prompt,
                "n_predict": max_tokens,
                "temperature": 0.0,
                **sampling,
                "cache_prompt": True,
                "stream": False,
            }
        ).encode()
        req = urllib.request.Request(
            self.url + "/completion", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=600) as r:
            return int(json.loads(r.read())["tokens_predicted"])

    def complete_all(
        self, prompts: list[str], max_tokens: int, clients: int, **sampling: float
    ) -> int:
        """Send ``prompts`` through ``clients`` concurrent clients; total reply tokens."""
        todo: queue.Queue[str] = queue.Queue()
        for p in prompts:
            todo.put(p)
        tokens: list[int] = []
        errors: list[BaseException] = []

        def client() -> None:
            while True:
                try:
                    p = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    tokens.append(self.complete(p, max_tokens, **sampling))
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=900)
        if errors:
            raise RuntimeError(f"a server request failed: {errors[0]!r}")
        return sum(tokens)


def items_of(prompts: Sequence[str], max_tokens: int) -> list[WorkItem]:
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return [WorkItem(k, p, greedy) for k, p in enumerate(prompts)]


def bench_b(args: argparse.Namespace, b: int, llm: Any, tokenize, out: dict) -> None:
    log = Path(args.server_log or f"/tmp/llama-server-B{b}.log")
    alone = LlamaLoop(llm, max_tokens=200)
    clock = not args.no_decode_clock
    with (
        Server(
            args.server, args.model, b, args.n_ctx_seq, args.threads, args.n_batch, log, clock
        ) as server,
        BatchGenerator(
            llm,
            slots=b,
            n_ctx_seq=args.n_ctx_seq,
            n_batch=args.n_batch,
            sampling=SamplingParams(temperature=0.0),
        ) as gen,
    ):

        def run(path: str, items: Sequence[WorkItem]) -> dict[str, Any]:
            """Complete ``items`` on ``path``: the reply tokens, and for the batch and the
            server their decode calls, seconds and tokens."""
            if path == "one":
                return {"tokens": sum(r.n_tokens for r in alone(items, lambda n: None).replies)}
            if path == "batch":
                before = engine_decode_totals(gen.stats)
                done = gen.complete_many([it.prompt for it in items], [it.sampling for it in items])
                computed = engine_decode_totals(gen.stats) - before
                return {"tokens": sum(c.n_tokens for c in done), "decode": computed}
            before = server.decode_totals() if clock else None
            cap = items[0].sampling.max_tokens
            tokens = server.complete_all([str(it.prompt) for it in items], cap, b)
            if before is None:
                return {"tokens": tokens}
            return {"tokens": tokens, "decode": server.decode_totals() - before}

        warm = items_of(WORKLOADS["L"].prompts(2, tokenize, seed=999_999), 4)
        for path in args.paths:  # untimed warm-up of every path
            run(path, warm)
        if clock and "server" in args.paths and server.decode_totals().calls == 0:
            raise RuntimeError(
                f"decode_clock counted no decode call of {args.server}: it must link "
                "libllama dynamically (llama.cpp's default build); or run with "
                "--no-decode-clock"
            )

        @functools.cache
        def prompts(r: int, workload: str) -> list[WorkItem]:
            w = WORKLOADS[workload]
            return items_of(w.prompts(args.items, tokenize, args.seed + 1000 * b + r), w.max_tokens)

        def report(r: int, p: Pass) -> None:
            if p.result is None:
                print(f"B={b} round {r + 1} {p.path:9s} failed: {p.error}", file=sys.stderr)
                return
            d = p.result.get("decode")
            calls = (
                f" decode {d.seconds / len(p.items):.3f} s/item, {d.calls} calls, {d.tokens} tokens"
                if d
                else ""
            )
            print(
                f"B={b} round {r + 1} {p.path:9s} {p.s_per_item:.3f} s/item "
                f"{p.result['tokens'] / len(p.items):.1f} tok/item{calls}",
                file=sys.stderr,
                flush=True,
            )

        paths = {
            f"{w}/{p}": functools.partial(lambda items, tick, p: run(p, items), p=p)
            for w in args.workloads
            for p in args.paths
        }
        done = run_rounds(
            paths, lambda r, name: prompts(r, name.split("/")[0]), args.rounds, on_pass=report
        )
        for w in args.workloads:
            out.setdefault("results", []).append(summary(done, w, args, b))
        stats = gen.stats
        out.setdefault("engine_stats", {})[str(b)] = {
            "items_batched": stats.items_batched,
            "items_alone": stats.items_alone,
            "prompt_tokens": stats.prompt_tokens,
            "prompt_tokens_cached": stats.prompt_tokens_cached,
            "prompt_tokens_prefilled": stats.prompt_tokens_prefilled,
            "prefix_copies": stats.prefix_copies,
            "decode_calls": stats.decode_calls,
            "cache_ram_saves": stats.cache_ram_saves,
            "cache_ram_loads": stats.cache_ram_loads,
            "batch_disabled_reason": stats.batch_disabled_reason,
        }


def _decode(p: Pass) -> DecodeTotals | None:
    return p.result.get("decode") if p.result else None


def summary(done: Sequence[Round], w: str, args: argparse.Namespace, b: int) -> dict[str, Any]:
    """Workload ``w``'s figures at ``b`` slots: per path and round the seconds per item and
    reply tokens, and the medians of the per-round ratios. With both decode clocks, per
    round and path the decode totals and the host seconds per item (wall less decode),
    and two ratios to the server's wall time: ``floor``, its decode time alone (what a
    batcher making the server's decode calls with no host time would take), and
    ``batch at equal decode``, llamabatch's host time plus the server's decode time (the
    ratio without the difference in speed of the same calls between two passes)."""
    per = {p: per_round(done, f"{w}/{p}") for p in args.paths}
    res: dict[str, Any] = {
        "b": b,
        "workload": w,
        "items": args.items,
        "rounds": args.rounds,
        "per_item_s": per,
        "tokens_per_item": {
            p: [x.result["tokens"] / len(x.items) for r in done if (x := r.get(f"{w}/{p}"))]
            for p in args.paths
        },
        "median_per_item_s": {
            p: statistics.median(ok) if (ok := [x for x in v if x is not None]) else None
            for p, v in per.items()
        },
    }
    for path, ref in (("batch", "one"), ("batch", "server")):
        if path in args.paths and ref in args.paths:
            ratios = paired(done, f"{w}/{path}", f"{w}/{ref}")
            res[f"ratios_{path}_over_{ref}"] = ratios
            res[f"ratio_{path}_over_{ref}"] = statistics.median(ratios) if ratios else None
    if args.no_decode_clock or not {"batch", "server"} <= set(args.paths):
        return res
    # per round where both passes ran: each pass with its decode totals
    rounds = [
        ((x, dx), (y, dy))
        for r in done
        if (x := r.get(f"{w}/batch"))
        and (y := r.get(f"{w}/server"))
        and (dx := _decode(x))
        and (dy := _decode(y))
    ]
    if not rounds:
        return res
    paths = ("batch", "server")
    res["decode"] = {p: [asdict(pair[k][1]) for pair in rounds] for k, p in enumerate(paths)}
    host = {
        p: [(pass_.seconds - d.seconds) / len(pass_.items) for pass_, d in (r[k] for r in rounds)]
        for k, p in enumerate(paths)
    }
    res["host_s_per_item"] = host
    res["median_host_ms_per_item"] = {p: 1e3 * statistics.median(v) for p, v in host.items()}
    floor = [dy.seconds / y.seconds for _, (y, dy) in rounds]
    equal = [(x.seconds - dx.seconds + dy.seconds) / y.seconds for (x, dx), (y, dy) in rounds]
    calls = [dx.calls / dy.calls for (_, dx), (_, dy) in rounds]
    res["ratios_floor_over_server"] = floor
    res["ratio_floor_over_server"] = statistics.median(floor)
    res["ratios_batch_at_equal_decode_over_server"] = equal
    res["ratio_batch_at_equal_decode_over_server"] = statistics.median(equal)
    res["ratio_calls_batch_over_server"] = statistics.median(calls)
    return res


def table(results: list[dict]) -> str:
    """The summary table (Markdown): medians of each path's seconds per item and of the
    per-round ratios, for the paths and clocks the run had."""
    host = "median_host_ms_per_item"
    cols = [
        ("one at a time s/item", lambda r: r["median_per_item_s"].get("one"), 3),
        ("llamabatch s/item", lambda r: r["median_per_item_s"].get("batch"), 3),
        ("llama-server s/item", lambda r: r["median_per_item_s"].get("server"), 3),
        ("llamabatch / one at a time", lambda r: r.get("ratio_batch_over_one"), 2),
        ("llamabatch / server", lambda r: r.get("ratio_batch_over_server"), 2),
        ("decode calls llamabatch / server", lambda r: r.get("ratio_calls_batch_over_server"), 2),
        ("host ms/item llamabatch", lambda r: r.get(host, {}).get("batch"), 1),
        ("host ms/item server", lambda r: r.get(host, {}).get("server"), 1),
        (
            "llamabatch at equal decode / server",
            lambda r: r.get("ratio_batch_at_equal_decode_over_server"),
            3,
        ),
        ("floor / server", lambda r: r.get("ratio_floor_over_server"), 3),
    ]
    cols = [c for c in cols if any(c[1](r) is not None for r in results)]
    lines = [
        "| B | workload | " + " | ".join(c[0] for c in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for r in results:
        cells = [f"{v:.{n}f}" if (v := f(r)) is not None else "" for _, f, n in cols]
        lines.append(f"| {r['b']} | {r['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(
        __doc__, model=None, rounds=3, threads=2, n_ctx_seq=1024, n_batch=512, seed=0, json=None
    )
    ap.add_argument(
        "--server", type=Path, default=Path(os.environ.get("LLAMA_SERVER", DEFAULT_SERVER))
    )
    ap.add_argument("--slots", type=int, nargs="+", default=[4, 8])
    ap.add_argument(
        "--items",
        type=int,
        default=16,
        help="items per round (default 16; with only a few, the start and the "
        "tail of a round, when slots run empty, weigh more than they do "
        "in a backlog)",
    )
    ap.add_argument("--workloads", nargs="+", default=["S", "U", "L"], choices=WORKLOADS)
    ap.add_argument("--server-log", default=None)
    ap.add_argument(
        "--paths",
        nargs="+",
        default=list(PATHS),
        choices=PATHS,
        help="the paths to run (default: all; leave out 'one' when only the ratio to "
        "llama-server is wanted: it takes half of a run)",
    )
    ap.add_argument(
        "--no-decode-clock",
        action="store_true",
        help="run llama-server without decode_clock.c preloaded (no decode split for it; no floor)",
    )
    args = ap.parse_args(argv)
    # SIGTERM (e.g. `kill PID`) unwinds like Ctrl-C, so the server is stopped on the way
    signal.signal(signal.SIGTERM, _interrupt)
    if not args.server.is_file():
        ap.error(
            f"no llama-server at {args.server}: set $LLAMA_SERVER or build it "
            "(see this script's docstring)"
        )
    args.model = str(args.model or default_model_path())
    llm = load_llama(
        args.model,
        n_ctx=args.n_ctx_seq,
        n_threads=args.threads,
        n_batch=args.n_batch,
        flash_attn=False,
    )

    def tokenize(text: str) -> list[int]:
        return llm.tokenize(text.encode(), add_bos=True, special=True)

    out: dict[str, Any] = {
        "command": sys.argv,
        "model": args.model,
        "threads": args.threads,
        "n_ctx_seq": args.n_ctx_seq,
        "n_batch": args.n_batch,
        "server": str(args.server),
        "workloads": {k: WORKLOADS[k].description for k in args.workloads},
    }
    t0 = time.perf_counter()
    try:
        for b in args.slots:
            bench_b(args, b, llm, tokenize, out)
    finally:
        out["wall_s"] = time.perf_counter() - t0
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        llm.close()
    print(table(out.get("results", [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
