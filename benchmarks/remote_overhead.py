"""The pool of servers on one machine: items/s and the per-item overhead (not CI).

Paths, each given the same number of fresh items per round (every path's prompts differ
from the others' past the chat header, so no path reuses another's prompt cache), in an
order that alternates from round to round (:func:`llamabatch.measure.rounds.run_rounds`):

- ``local``: the in-process engine, ``BatchGenerator`` on a ``Llama`` (``--threads``,
  ``--slots``).
- ``pool1``: ``RemoteGenerator`` on one ``llama_cpp.server`` process (``--threads``).
- ``pool2``: ``RemoteGenerator`` on two server processes (``--threads`` each).
- ``direct``: the same requests as ``pool1`` (bodies made by the same code) sent one after
  the other with a bare ``httpx.Client`` to the same server.

Then the overhead of the remote path per item, measured in pairs: ``--pairs`` times, one
item through ``RemoteGenerator.complete_many([prompt])`` and one through the bare client,
in alternating order, both with ``max_tokens=1`` (so the server's work is small and the
same); the overhead is the median of the differences.

On a loaded machine the server's own time varies by more than the overhead, so the same
paired measure is also run against a stub server in another process that answers every
request at once with a canned completion (``--stub-pairs`` pairs): same requests, same
server for both paths, real sockets, and nearly nothing but the client sides to time.

Prints one JSON object: medians over rounds of items/s per path, ratios to ``local``, and
the paired overheads in ms per item.

    nice -n 10 .venv/bin/python benchmarks/remote_overhead.py [--rounds 5] [--items 16]
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.cli.options import script_parser
from llamabatch.measure.rounds import run_rounds
from llamabatch.measure.stats import per_round, seconds
from llamabatch.measure.workloads import tagged
from llamabatch.model import default_model_path, load_llama
from llamabatch.remote import RemoteGenerator, build_request
from llamabatch.remote.client import parse_reply
from llamabatch.testing.servers import LocalServer, free_port

GREEDY = SamplingParams(temperature=0)


def prompts(round_: int, path: str, n: int) -> list[str]:
    """Fresh prompts of ``path`` in round ``round_``."""
    return tagged(f"{path}-{round_}", n)


def checked(run: Callable[[list[str]], list[str]]) -> Callable[..., list[str]]:
    """``run`` as a path of ``run_rounds`` that refuses an empty reply."""

    def path(items: Sequence[str], progress: object) -> list[str]:
        texts = run(list(items))
        if any(not t for t in texts):
            raise RuntimeError(f"an empty reply to {items[0]!r}")
        return texts

    return path


def direct_path(client: httpx.Client, url: str, model_id: str | None, max_tokens: int):
    """The requests ``RemoteGenerator`` sends (bodies made by the same code), one after
    the other with a bare ``httpx.Client``; the reply texts."""

    def direct(items: list[str]) -> list[str]:
        texts = []
        for item in items:
            req = build_request(item, GREEDY, max_tokens)
            body = dict(req.body, model=model_id) if model_id else req.body
            reply = client.post(url + req.endpoint, json=body).raise_for_status().json()
            texts.append(parse_reply(reply).text)
        return texts

    return direct


def _stub_server(port: int) -> None:
    """Answer /v1/models and /v1/completions at once with a canned reply; 404 elsewhere."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    reply = json.dumps(
        {
            "object": "text_completion",
            "choices": [{"index": 0, "text": " bug", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21},
        }
    ).encode()
    models = json.dumps({"object": "list", "data": [{"id": "stub"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # one small answer: no 40 ms delayed-ACK wait

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(200, models) if self.path == "/v1/models" else self._send(404, b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(200, reply)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def paired_overhead_ms(url: str, pairs: int, max_tokens: int) -> tuple[list[float], list[float]]:
    """(remote - direct, direct) in ms for ``pairs`` single items, order alternating."""
    short = RemoteGenerator([url], max_tokens=max_tokens, sampling=GREEDY)
    short.complete_many(prompts(-1, "probe", 1))  # probes the server: its model id
    client = httpx.Client(timeout=600)
    runs = {
        "direct": checked(direct_path(client, url, short.servers[0].model, max_tokens)),
        "remote": checked(lambda items: [c.text for c in short.complete_many(items)]),
    }
    done = run_rounds(
        runs,
        lambda k, name: prompts(k, "pair-" + name, 1),
        pairs,
        warmup=lambda name: prompts(-1, "warm-" + name, 2),  # connections, threads
    )
    short.close()
    client.close()
    remote, direct = (per_round(done, name, seconds) for name in ("remote", "direct"))
    return [1000 * (r - d) for r, d in zip(remote, direct)], [1000 * d for d in direct]


def _summary(diffs: list[float], directs: list[float]) -> dict[str, object]:
    return {
        "pairs": len(diffs),
        "median": round(statistics.median(diffs), 3),
        "quartiles": [round(q, 3) for q in statistics.quantiles(diffs, n=4)],
        "direct_ms_median": round(statistics.median(directs), 3),
    }


def main() -> None:
    ap = script_parser(__doc__, rounds=5, items=16, max_tokens=16, threads=1)
    ap.add_argument("--pairs", type=int, default=40, help="pairs on the real server")
    ap.add_argument("--stub-pairs", type=int, default=400, help="pairs on the stub server")
    ap.add_argument("--slots", type=int, default=4, help="slots of the local engine")
    args = ap.parse_args()
    model = default_model_path()
    logs = Path(tempfile.mkdtemp(prefix="remote-overhead-"))
    pair = [
        LocalServer(model, n_ctx=2048, n_threads=args.threads, log=logs / f"s{k}.log")
        for k in range(2)
    ]
    one = pair[0]
    llm = load_llama(model, n_ctx=512, n_threads=args.threads)
    try:
        for server in pair:
            server.start()
        local = BatchGenerator(
            llm, slots=args.slots, n_ctx_seq=512, max_tokens=args.max_tokens, sampling=GREEDY
        )
        pool1 = RemoteGenerator([one.url], max_tokens=args.max_tokens, sampling=GREEDY)
        pool2 = RemoteGenerator([s.url for s in pair], max_tokens=args.max_tokens, sampling=GREEDY)
        client = httpx.Client(timeout=600)
        pool1.complete_many(prompts(-1, "probe", 1))  # probes the server: its model id
        paths = {
            "local": lambda items: [c.text for c in local.complete_many(items)],
            "pool1": lambda items: [c.text for c in pool1.complete_many(items)],
            "direct": direct_path(client, one.url, pool1.servers[0].model, args.max_tokens),
            "pool2": lambda items: [c.text for c in pool2.complete_many(items)],
        }
        done = run_rounds(  # the warm-up: the servers' first prompt too
            {name: checked(run) for name, run in paths.items()},
            lambda r, name: prompts(r, name, args.items),
            args.rounds,
            warmup=lambda name: prompts(-1, name, 2),
        )
        took = {name: per_round(done, name, seconds) for name in paths}
        overhead_ms = [1000 * (p - d) / args.items for p, d in zip(took["pool1"], took["direct"])]
        diffs, directs = paired_overhead_ms(one.url, args.pairs, 1)
        stub_port = free_port()
        stub = multiprocessing.Process(target=_stub_server, args=(stub_port,), daemon=True)
        stub.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    httpx.get(f"http://127.0.0.1:{stub_port}/v1/models", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            stub_diffs, stub_directs = paired_overhead_ms(
                f"http://127.0.0.1:{stub_port}", args.stub_pairs, 1
            )
        finally:
            stub.terminate()
            stub.join(10)
        rate = {n: statistics.median(args.items / s for s in v) for n, v in took.items()}
        report = {
            "rounds": args.rounds,
            "items_per_round": args.items,
            "max_tokens": args.max_tokens,
            "threads": args.threads,
            "local_slots": args.slots,
            "items_per_s": {n: round(v, 2) for n, v in rate.items()},
            "ratio_to_local": {n: round(v / rate["local"], 3) for n, v in rate.items()},
            "rounds_pool1_minus_direct_ms_per_item": round(statistics.median(overhead_ms), 1),
            "paired_overhead_ms_per_item": _summary(diffs, directs),
            "stub_server_overhead_ms_per_item": _summary(stub_diffs, stub_directs),
        }
        print(json.dumps(report, indent=2))
        for gen in (local, pool1, pool2):
            gen.close()
        client.close()
    finally:
        for server in pair:
            server.stop()
        llm.close()


if __name__ == "__main__":
    main()
