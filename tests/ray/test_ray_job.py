"""``llamabatch complete --ray`` on a local Ray cluster, real model: the local job's
greedy replies in the same order, the same lines and constraints, and ``--resume``
after a SIGKILL of the driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_util import agree_until_near_tie, job_lines

from llamabatch.cli.main import main

pytestmark = pytest.mark.real_model

#: A fast job: greedy, 8 reply tokens, small contexts, one thread per model.
FAST = ("--temperature", "0", "--max-tokens", "8", "--n-ctx-seq", "512", "--threads", "1")


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _local_and_ray(src: Path, flags: list[str], ray_address, model_path, capsys) -> dict:
    """Run ``complete`` on ``src`` locally and on Ray with ``flags``: the two outputs."""
    outs = {}
    for where in ("local", "ray"):
        outs[where] = src.with_name(f"{where}.jsonl")
        ray = ["--ray", ray_address] if where == "ray" else []
        argv = ["complete", str(src), "-o", str(outs[where]), "--model", str(model_path)]
        code = main([*argv, *FAST, *flags, *ray])
        err = capsys.readouterr().err
        assert code == 0 and "Traceback" not in err, (where, err)
    return outs


def test_24_items_give_the_local_jobs_greedy_replies_in_the_same_order(
    ray_address, model_path, tmp_path, capsys
):
    src = _write(tmp_path / "in.jsonl", job_lines(24))
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    common = ("complete", str(src), "--model", str(model_path), *FAST, "--slots", "4")
    assert main([*common, "-o", str(local), "--quiet"]) == 0
    code = main([*common, "-o", str(on_ray), "--ray", ray_address, "--actors", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    a, b = _read(local), _read(on_ray)
    assert [r["id"] for r in b] == [r["id"] for r in a] == [line["id"] for line in job_lines(24)]
    assert all(r["error"] is None and 1 <= r["n_tokens"] <= 8 for r in b), b
    assert [r["path"] for r in b].count("batch") == 24
    parted = [x["id"] for x, y in zip(a, b) if not agree_until_near_tie(x, y)]
    assert not parted, parted
    # one progress display and our summary line; Ray's progress bars are off
    assert "ray: 2 actors" in err and "Running Dataset" not in err


def test_a_lines_constraint_replaces_the_flags_on_ray_as_locally(
    ray_address, model_path, tmp_path, capsys
):
    ticket = "Which category fits: I was charged twice this month. Reply with one word."
    lines = [
        {"id": "labels", "messages": [{"role": "user", "content": ticket}]},
        {"id": "number", "prompt": "The year after 1999 is", "json_schema": {"type": "integer"}},
        {"id": "free", "prompt": "Once upon a time", "response_format": {"type": "text"}},
        {"id": "bad", "prompt": "x", "max_tokens": "many"},
        {"id": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    ]
    src = _write(tmp_path / "in.jsonl", lines)
    flags = ["--choices", "bug,billing", "--skip-bad", "--quiet"]
    outs = _local_and_ray(src, flags, ray_address, model_path, capsys)
    for where, out in outs.items():
        r = {rec["id"]: rec for rec in _read(out)}
        # the bad line's error line keeps its own id, the same locally and on Ray
        assert [rec["id"] for rec in _read(out)] == ["labels", "number", "free", "bad", "chat"]
        assert r["labels"]["text"] in ("bug", "billing"), (where, r)
        assert r["number"]["text"].strip().lstrip("-").isdigit(), (where, r)
        assert r["free"]["n_tokens"] == 8 and r["free"]["finish_reason"] == "length", (where, r)
        assert r["bad"]["finish_reason"] == "error" and "max_tokens" in r["bad"]["error"], (
            where,
            r,
        )
        # two tokens may not spell a choice: then the item's error says to raise
        # max_tokens (never a fragment), the same locally and on Ray
        chat = r["chat"]
        assert chat["text"] in ("bug", "billing") or (
            chat["finish_reason"] == "error" and "max_tokens" in chat["error"]
        ), (where, r)
    assert _read(outs["local"])[-1]["finish_reason"] == _read(outs["ray"])[-1]["finish_reason"]


def test_resume_after_a_sigkill_of_the_driver_writes_every_item_once_in_order(
    ray_address, model_path, tmp_path
):
    lines = job_lines(24)
    src, out = _write(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    argv = [sys.executable, "-m", "llamabatch", "complete", str(src), "-o", str(out)]
    argv += ["--model", str(model_path), *FAST, "--slots", "2", "--page-size", "4"]
    argv += ["--ray", ray_address, "--quiet"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    driver = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:
        if out.exists() and len(out.read_text(encoding="utf-8").splitlines()) >= 4:
            break
        time.sleep(0.2)
    assert driver.poll() is None, driver.stderr.read()
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    driver.stderr.close()
    written = len(_read(out))
    assert 4 <= written < 24 and written % 4 == 0, written  # whole blocks only
    again = subprocess.run(
        argv + ["--resume"], env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr
    ids = [r["id"] for r in _read(out)]
    assert ids == [line["id"] for line in lines]  # every item once, in input order


def test_openai_output_of_n_replies_on_ray_has_every_choice_and_its_usage(
    ray_address, model_path, tmp_path, capsys
):
    lines = [
        {"id": "many", "prompt": "apple, apple, apple, apple,", "n": 3, "choices": ["x", "y"]},
        {"id": "free", "prompt": "The sky is", "n": 2},
        {"id": "one", "prompt": "pear, pear, pear, pear,"},
    ]
    src = _write(tmp_path / "in.jsonl", lines)
    outs = _local_and_ray(src, ["--output-format", "openai"], ray_address, model_path, capsys)
    for where, out in outs.items():
        bodies = {r["custom_id"]: r["response"]["body"] for r in _read(out)}
        for line in lines:
            body = bodies[line["id"]]
            n = line.get("n", 1)
            assert [c["index"] for c in body["choices"]] == list(range(n)), (where, body)
            assert all(c["finish_reason"] in ("stop", "length") for c in body["choices"])
            assert body["usage"]["completion_tokens"] >= n, (where, body)  # >= 1 token each
        assert sum(bodies["many"]["votes"].values()) == 3, (where, bodies["many"])
        assert {c["text"] for c in bodies["many"]["choices"]} <= {"x", "y"}


def test_openai_output_on_ray_carries_the_logprobs_asked_for_as_locally(
    ray_address, model_path, tmp_path, capsys
):
    chat = [{"role": "user", "content": "apple, apple, apple, apple,"}]
    lines = [
        {
            "custom_id": "chat",
            "url": "/v1/chat/completions",
            "body": {"messages": chat, "logprobs": True, "top_logprobs": 2},
        },
        {
            "custom_id": "text",
            "url": "/v1/completions",
            "body": {"prompt": "apple, apple, apple, apple,", "logprobs": 2, "n": 2},
        },
        {"custom_id": "none", "url": "/v1/completions", "body": {"prompt": "pear, pear,"}},
    ]
    src = _write(tmp_path / "in.jsonl", lines)
    outs = _local_and_ray(src, ["--output-format", "openai"], ray_address, model_path, capsys)
    bodies = {
        where: {r["custom_id"]: r["response"]["body"] for r in _read(out)}
        for where, out in outs.items()
    }
    for where, body in bodies.items():
        (chat_choice,) = body["chat"]["choices"]
        content = chat_choice["logprobs"]["content"]
        assert "".join(c["token"] for c in content) == chat_choice["message"]["content"], where
        assert all(len(c["top_logprobs"]) in (2, 3) for c in content), where
        for choice in body["text"]["choices"]:  # n = 2: each reply its own logprobs
            layout = choice["logprobs"]
            assert "".join(layout["tokens"]) == choice["text"], (where, choice)
            assert layout["text_offset"][0] == len("apple, apple, apple, apple,"), where
        assert body["none"]["choices"][0]["logprobs"] is None, where
    # greedy, confident prompts: the same tokens on Ray as locally
    for custom_id in ("chat", "text"):
        local, on_ray = (bodies[w][custom_id]["choices"][0]["logprobs"] for w in bodies)
        key = "content" if custom_id == "chat" else "tokens"
        tokens = [c["token"] if custom_id == "chat" else c for c in local[key]]
        ray_tokens = [c["token"] if custom_id == "chat" else c for c in on_ray[key]]
        assert ray_tokens[:3] == tokens[:3], (custom_id, local, on_ray)
