"""Soak test (not CI): thousands of items through one generator, nothing lost.

One :class:`~llamabatch.BatchGenerator` on the default model (SmolLM2-135M-Instruct
Q4_1) completes ``--items`` short chat prompts group by group (``iter_groups``). About 1 %
of the items are bad on purpose (empty, a negative token id) and every 250th is too long
for its sequence (completed alone). It checks, and prints as JSON:

* after every page: no slot of the batch context holds more than its ``n_ctx_seq``
  positions (``BatchContext.seq_pos_max(s) < n_ctx_seq``; slots keep their cache
  between items, that is the slot engine's prompt cache);
* every item has exactly one result, in input order (``index``), of its own prompt
  (``n_prompt_tokens`` equals the prompt's token count; prompt lengths vary), with an
  error exactly when the item was bad;
* resident memory (``/proc/self/statm``) after the first 200 items and at the end
  differ by under 5 %;
* a spot check: every 100th item completed again alone gives the same greedy tokens.

Only (index, prompt tokens, error?) of each result is kept, as a tagger writing its
results out would, so that the memory figure is the library's own.

    .venv/bin/python benchmarks/soak.py [--items 2000] [--slots 4] [--max-tokens 16]
        [--json OUT]

Exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import llama_cpp

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.model import default_model_path

WORDS = (
    "apple",
    "hammer",
    "salmon",
    "violin",
    "tulip",
    "granite",
    "kettle",
    "sparrow",
    "denim",
    "comet",
    "basil",
    "lantern",
    "walnut",
    "glacier",
    "saffron",
    "anvil",
)
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process (second field of /proc/self/statm, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def prompt_of(i: int) -> object:
    """Item ``i``: a short tagging prompt whose length varies with ``i``, or a bad one."""
    if i % 97 == 13:
        return ""  # empty: an error in its place
    if i % 97 == 61:
        return [5, -1]  # a negative token id: an error in its place
    words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 5))
    text = f"Item {i}: {words}. Which of these is a plant? Answer in one word."
    if i % 250 == 125:
        text += " Take your time and think about it." * 30  # too long for a slot
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--n-ctx-seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args()

    path = default_model_path()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=args.threads, verbose=False)
    prompts = [prompt_of(i) for i in range(args.items)]
    n_tokens = [
        len(llm.tokenize(p.encode(), special=True))
        if isinstance(p, str)
        else (0 if not p or min(p) < 0 else len(p))
        for p in prompts
    ]
    greedy = SamplingParams(temperature=0)
    gen = BatchGenerator(
        llm, slots=args.slots, n_ctx_seq=args.n_ctx_seq, max_tokens=args.max_tokens, sampling=greedy
    )

    # what a tagger would write out; kept small so that RSS measures the library itself
    results: list[tuple[int, int, bool]] = []  # (index, n_prompt_tokens, is an error)
    sample = set(range(0, args.items, 100))
    sampled: dict[int, tuple[int, ...]] = {}
    dirty_groups = 0
    rss = {}
    t0 = time.perf_counter()
    for group in gen.iter_groups(prompts):
        results.extend((c.index, c.n_prompt_tokens, c.error is not None) for c in group)
        sampled.update((c.index, c.token_ids) for c in group if c.index in sample)
        ctx = gen.backend.batch_context
        if ctx is not None and any(
            ctx.seq_pos_max(s) >= ctx.limits.n_ctx_seq for s in range(ctx.limits.n_seq_max)
        ):
            dirty_groups += 1
        done = len(results)
        if done >= 200 and "after_200" not in rss:
            rss["after_200"] = rss_bytes()
        if done % 500 < len(group):
            print(
                f"soak: {done}/{args.items} items, {time.perf_counter() - t0:.0f} s, "
                f"RSS {rss_bytes() / 2**20:.1f} MiB",
                file=sys.stderr,
                flush=True,
            )
    wall = time.perf_counter() - t0
    rss["end"] = rss_bytes()
    rss.setdefault("after_200", rss["end"])  # fewer than 200 items
    stats, limits = gen.stats, gen.limits

    in_order = [index for index, _, _ in results] == list(range(args.items))
    own_prompt = all(n == want for (_, n, _), want in zip(results, n_tokens))
    bad = [isinstance(p, list) or p == "" for p in prompts]
    errors_in_place = all(failed == b for (_, _, failed), b in zip(results, bad))
    gen.close()

    order = sorted(sample)
    with BatchGenerator(llm, slots=1, max_tokens=args.max_tokens, sampling=greedy) as alone:
        again = alone.complete_many([prompts[i] for i in order])
    spot_equal = sum(a.token_ids == sampled[i] for a, i in zip(again, order))

    growth = (rss["end"] - rss["after_200"]) / rss["after_200"]
    report = {
        "model": path.name,
        "items": args.items,
        "slots": args.slots,
        "max_tokens": args.max_tokens,
        "n_ctx_seq_allocated": limits and limits.n_ctx_seq,
        "n_threads": args.threads,
        "wall_s": round(wall, 1),
        "items_per_s": round(args.items / wall, 2),
        "prompt_tokens_cached": stats.prompt_tokens_cached,
        "items_batched": stats.items_batched,
        "items_alone": stats.items_alone,
        "items_failed": stats.items_failed,
        "generated_tokens": stats.generated_tokens,
        "batch_disabled_reason": stats.batch_disabled_reason,
        "rss_after_200_mib": round(rss["after_200"] / 2**20, 2),
        "rss_end_mib": round(rss["end"] / 2**20, 2),
        "rss_growth_pct": round(100 * growth, 2),
        "pages_with_an_overfull_slot": dirty_groups,
        "results": len(results),
        "in_order": in_order,
        "own_prompt": own_prompt,
        "errors_in_place": errors_in_place,
        "spot_check_equal_alone": f"{spot_equal}/{len(order)}",
    }
    ok = (
        len(results) == args.items
        and in_order
        and own_prompt
        and errors_in_place
        and dirty_groups == 0
        and abs(growth) < 0.05
        and stats.batching_enabled
    )
    report["ok"] = ok
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
