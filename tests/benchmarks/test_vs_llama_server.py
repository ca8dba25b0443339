"""benchmarks/vs_llama_server.py: its decode clock (an LD_PRELOAD library counting a
process's decode calls) counts what a program linked to libllama computes, and the script
run end to end against a stand-in llama-server reports each path, the decode split and the
floor. No timing is asserted."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from bench_scripts import BENCHMARKS, load_script, stand_in

#: A stand-in libllama: llama_decode and llama_process take 2 ms each and count tokens
#: (a batch's n_tokens; 3 for a llama_process call), which llama_perf_context reports.
FAKE_LLAMA = r"""
#include <stdint.h>
#include <time.h>
struct llama_batch { int32_t n_tokens; void *arrays[6]; };  /* llama.h's layout */
struct perf { double ms[4]; int32_t n_p_eval, n_eval, n_reused; };
static int32_t seen;
static void nap(void) { struct timespec t = {0, 2000000}; nanosleep(&t, 0); }
int32_t llama_decode(void *ctx, struct llama_batch b) { nap(); seen += b.n_tokens; return 0; }
int32_t llama_process(void *ctx, int type, void *batch) { nap(); seen += 3; return 0; }
struct perf llama_perf_context(const void *ctx) {
    struct perf p = {0};
    p.n_p_eval = seen;
    return p;
}
"""

#: A program calling it through its dynamic symbols, as llama-server calls libllama.
CALLER = r"""
#include <stdint.h>
struct llama_batch { int32_t n_tokens; void *arrays[6]; };
int32_t llama_decode(void *ctx, struct llama_batch b);
int32_t llama_process(void *ctx, int type, void *batch);
int main(void) {
    struct llama_batch b = {5};
    for (int i = 0; i < 4; i++) llama_decode(0, b);
    return llama_process(0, 1, 0);
}
"""

#: A stand-in llama-server: /health, and /completion answering n_predict // 2 tokens after
#: 10 ms (one request at a time), of which it books 8 ms, one call per token and the
#: prompt's words as tokens on the decode clock (the file in $LLAMABATCH_DECODE_CLOCK), as
#: decode_clock.c would (unless $FAKE_SERVER_BOOKS is 0).
FAKE_SERVER = r"""#!{python}
import json, os, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
clock = os.environ["LLAMABATCH_DECODE_CLOCK"]
one_at_a_time = threading.Lock()  # one decode loop, as llama-server has

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply({{"status": "ok"}})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = req["n_predict"] // 2
        with one_at_a_time, open(clock, "r+b") as f:
            time.sleep(0.010)
            if os.environ.get("FAKE_SERVER_BOOKS") == "0":  # a statically linked server
                self.reply({{"tokens_predicted": n}})
                return
            calls, ns, tokens = struct.unpack("=3Q", f.read(24))
            f.seek(0)
            words = len(req["prompt"].split())
            f.write(struct.pack("=3Q", calls + n, ns + 8_000_000, tokens + words + n))
        self.reply({{"tokens_predicted": n}})

ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def gcc(tmp_path, name: str, source: str, *flags: str) -> str:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["gcc", "-O1", "-o", str(out), str(src), *flags], check=True)
    return str(out)


def test_decode_clock_counts_a_programs_decode_calls(tmp_path):
    vs = load_script("vs_llama_server", BENCHMARKS / "vs_llama_server.py")
    clock = vs.decode_clock_library(tmp_path / "decode_clock.so")
    gcc(tmp_path, "libllama.so", FAKE_LLAMA, "-shared", "-fPIC")
    caller = gcc(tmp_path, "caller", CALLER, f"-L{tmp_path}", "-lllama", f"-Wl,-rpath,{tmp_path}")
    totals = tmp_path / "totals"
    totals.write_bytes(bytes(24))
    env = {**os.environ, "LD_PRELOAD": str(clock), "LLAMABATCH_DECODE_CLOCK": str(totals)}
    assert subprocess.run([caller], env=env).returncode == 0  # llama_process's return passed on
    calls, ns, tokens = struct.unpack("=3Q", totals.read_bytes())
    assert (calls, tokens) == (5, 4 * 5 + 3)
    assert ns >= 5 * 2_000_000
    # without the variable every call still reaches the library, uncounted
    totals.write_bytes(bytes(24))
    env.pop("LLAMABATCH_DECODE_CLOCK")
    assert subprocess.run([caller], env=env).returncode == 0
    assert totals.read_bytes() == bytes(24)


@pytest.mark.real_model
def test_vs_llama_server_reports_the_decode_split_and_the_floor(tmp_path, model_path):
    server = stand_in(tmp_path, "llama-server", FAKE_SERVER)
    out = tmp_path / "vs.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "vs_llama_server.py"), "--model", model_path]
        + ["--slots", "2", "--rounds", "2", "--items", "2", "--workloads", "S", "L"]
        + ["--paths", "batch", "server", "--threads", "2", "--n-ctx-seq", "1024"]
        + ["--server", str(server), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HOME": str(tmp_path)},  # the clock library is built here
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / ".cache/llamabatch/decode_clock.so").is_file()
    results = json.loads(out.read_text())["results"]
    assert [(r["b"], r["workload"]) for r in results] == [(2, "S"), (2, "L")]
    for r in results:
        assert set(r["per_item_s"]) == {"batch", "server"}  # 'one' left out
        assert len(r["ratios_batch_over_server"]) == 2
        server_decode = r["decode"]["server"]
        # the stand-in's books: one call per reply token, 8 ms per request
        assert [d["calls"] for d in server_decode] == [
            2 * t for t in r["tokens_per_item"]["server"]
        ]
        assert all(d["seconds"] == pytest.approx(2 * 0.008) for d in server_decode)
        batch = r["decode"]["batch"]
        assert all(d["calls"] > 0 and d["tokens"] > d["calls"] for d in batch)
        for path, (d, s) in {
            "batch": (batch, r["per_item_s"]["batch"]),
            "server": (server_decode, r["per_item_s"]["server"]),
        }.items():
            host = [s_i - d_i["seconds"] / 2 for d_i, s_i in zip(d, s)]
            assert r["host_s_per_item"][path] == pytest.approx(host)
        floor = [d["seconds"] / (2 * s) for d, s in zip(server_decode, r["per_item_s"]["server"])]
        assert r["ratios_floor_over_server"] == pytest.approx(floor)
        assert 0 < r["ratio_floor_over_server"] < 1
    table = done.stdout
    assert "floor / server" in table and "one at a time" not in table


@pytest.mark.real_model
def test_vs_llama_server_stops_when_the_clock_counts_nothing(tmp_path, model_path):
    server = stand_in(tmp_path, "llama-server", FAKE_SERVER)
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "vs_llama_server.py"), "--model", model_path]
        + ["--slots", "2", "--rounds", "1", "--items", "2", "--workloads", "L"]
        + ["--paths", "batch", "server", "--server", str(server)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HOME": str(tmp_path), "FAKE_SERVER_BOOKS": "0"},
    )
    assert done.returncode != 0
    assert "decode_clock counted no decode call" in done.stderr
    assert "--no-decode-clock" in done.stderr
