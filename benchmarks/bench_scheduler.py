"""The scheduler's own cost: pure-Python microseconds per sequence-step, on the fake.

For each slots value, ``BatchGenerator(backend=FakeBackend(check=False))`` completes
``--items`` prompts whose replies are ``--reply`` tokens long (then an EOG). The fake's
own share is measured apart: the same calls are recorded once, then replayed on a fresh
fake with no scheduler around them, and that time is subtracted. A sequence-step is one
token sampled for one sequence (reply tokens + the EOG), batched or alone.

    python benchmarks/bench_scheduler.py [--items 10000] [--slots 1 4 8] [--reply 35]
        [--prompt 32] [--repeat 3] [--json OUT] [--profile SLOTS]

Target: <= 20 us per sequence-step, so that a 20 ms GPU step costs < 1 %.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import platform
import pstats
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.measure.rounds import run_rounds
from llamabatch.measure.stats import Spread, per_round
from llamabatch.testing import EOG_ID, FakeBackend

TARGET_US = 20.0


@dataclass(slots=True)
class Row:
    """One slots value's figures."""

    slots: int
    items: int
    seq_steps: int
    decode_calls: int
    total_s: float
    fake_s: float
    scheduler_s: float
    us_per_seq_step: float
    us_per_item: float


class Recorder:
    """Passes calls to a fake and records them, so they can be replayed without us."""

    def __init__(self, fake: FakeBackend) -> None:
        self.fake, self.calls = fake, []
        self.info, self.vocab, self.closed = fake.info, fake.vocab, fake.closed

    def __getattr__(self, name: str):
        method = getattr(self.fake, name)

        def call(*args):
            self.calls.append((name, args))
            return method(*args)

        return call

    def run_alone(self, tokens: Sequence[int], sampling, targets) -> Iterator:
        pulled = [0]
        self.calls.append(("run_alone", (tokens, sampling, targets, pulled)))
        for out in self.fake.run_alone(tokens, sampling, targets):
            pulled[0] += 1
            yield out


def make_fake(reply_len: int) -> FakeBackend:
    reply = tuple(range(97, 97 + reply_len))
    return FakeBackend(
        lambda prompt: reply, eog_ids=(EOG_ID,), n_ctx=1 << 20, max_slots=256, check=False
    )


def make_prompts(n: int, length: int) -> list[list[int]]:
    return [[(i + k) % 200 + 1 for k in range(length)] for i in range(n)]


def replay(calls: list, reply_len: int) -> float:
    """Seconds the fake alone takes for ``calls`` (a fresh fake, same call sequence)."""
    fake = make_fake(reply_len)
    gc.collect()
    start = time.perf_counter()
    for name, args in calls:
        if name == "run_alone":
            tokens, sampling, targets, pulled = args
            stream = fake.run_alone(tokens, sampling, targets)
            for _ in range(pulled[0]):
                next(stream)
            stream.close()
        else:
            getattr(fake, name)(*args)
    return time.perf_counter() - start


def run_once(backend, slots: int, prompts: list, max_tokens: int) -> tuple[float, list]:
    gen = BatchGenerator(
        backend=backend,
        slots=slots,
        n_ctx_seq=4096,
        n_batch=512,
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=0),
    )
    gc.collect()
    start = time.perf_counter()
    out = gen.complete_many(prompts)
    elapsed = time.perf_counter() - start
    gen.close()
    return elapsed, out


def measure(slots: int, items: int, reply_len: int, prompt_len: int, repeat: int) -> Row:
    """Best of ``repeat`` runs, and best of ``repeat`` replays of the fake's share (the
    two alternating in rounds: :func:`llamabatch.measure.rounds.run_rounds`)."""
    prompts = make_prompts(items, prompt_len)
    max_tokens = reply_len + 5
    recorder = Recorder(make_fake(reply_len))
    run_once(recorder, slots, prompts, max_tokens)

    def engine(its, tick):
        fake = make_fake(reply_len)
        return (*run_once(fake, slots, its, max_tokens), fake)

    paths = {"engine": engine, "fake": lambda its, tick: replay(recorder.calls, reply_len)}
    done = run_rounds(paths, lambda r, name: prompts, repeat)
    total = Spread.of(per_round(done, "engine", lambda p: p.result[0])).min
    fake_s = Spread.of(per_round(done, "fake", lambda p: p.result)).min
    _, out, fake = done[-1].get("engine").result
    assert all(c.n_tokens == reply_len and c.finish_reason == "stop" for c in out)
    steps = sum(c.n_tokens + (c.finish_reason == "stop") for c in out)
    sched = max(total - fake_s, 0.0)
    return Row(
        slots,
        items,
        steps,
        fake.num_decode_calls,
        total,
        fake_s,
        sched,
        sched / steps * 1e6,
        sched / items * 1e6,
    )


def profile(slots: int, items: int, reply_len: int, prompt_len: int) -> None:
    prompts = make_prompts(items, prompt_len)
    profiler = cProfile.Profile()
    profiler.enable()
    run_once(make_fake(reply_len), slots, prompts, reply_len + 5)
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--reply", type=int, default=35, help="reply tokens per item")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per item")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="SLOTS",
        help="print a cProfile of one run with SLOTS instead",
    )
    args = parser.parse_args(argv)
    if args.profile is not None:
        profile(args.profile, args.items, args.reply, args.prompt)
        return 0
    rows = [measure(s, args.items, args.reply, args.prompt, args.repeat) for s in args.slots]
    print(
        f"scheduler overhead: {args.items} items, prompts of {args.prompt} tokens, "
        f"replies of {args.reply} tokens + EOG; best of {args.repeat}; "
        f"Python {platform.python_version()}"
    )
    print(
        "| slots | seq-steps | decode calls | total s | fake s | scheduler s "
        "| us/seq-step | us/item |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.slots} | {r.seq_steps} | {r.decode_calls} | {r.total_s:.3f} | "
            f"{r.fake_s:.3f} | {r.scheduler_s:.3f} | {r.us_per_seq_step:.2f} | "
            f"{r.us_per_item:.1f} |"
        )
    worst = max(r.us_per_seq_step for r in rows)
    print(
        f"worst {worst:.2f} us per sequence-step (target <= {TARGET_US:.0f}): "
        f"{'ok' if worst <= TARGET_US else 'OVER'}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "target_us_per_seq_step": TARGET_US,
                    "items": args.items,
                    "reply_tokens": args.reply,
                    "prompt_tokens": args.prompt,
                    "python": platform.python_version(),
                    "rows": [asdict(r) for r in rows],
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
