"""Helpers shared by the tests of ``llamabatch complete`` (tests/test_cli*.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamabatch.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tag_prompts.jsonl"

#: Options of a fast real-model job: short replies, small contexts, greedy, one thread
#: (on 2 cores, a second busy process makes 2 llama.cpp threads 20 times slower).
FAST = ("--max-tokens", "4", "--n-ctx-seq", "512", "--temperature", "0", "--threads", "1")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """Run ``llamabatch`` in this process; return (status, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def single_error_line(err: str) -> str:
    """The one line of ``err``, checked: no traceback, starts with ``llamabatch``."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("llamabatch")
    return lines[0]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_jsonl(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")
    return path


def example_prompts(n: int) -> list[str]:
    """The first ``n`` prompts of examples/tag_prompts.jsonl."""
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()[:n]
    return [json.loads(line)["prompt"] for line in lines]


def popen_cli(*argv: object, **kwargs) -> subprocess.Popen:
    """Start ``python -m llamabatch`` in a subprocess (stderr piped, text)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "llamabatch", *map(str, argv)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


#: Line fields that ask for more than one generated reply, and how tune's and bench's
#: refusal names each (their one-at-a-time loop gives one reply per item).
MULTI_REPLY_LINES = [
    ({"n": 3}, "n=3 asks for 3 replies"),
    ({"choices": ["a", "b"], "score_choices": True}, "score_choices asks for label scores"),
    ({"logprobs": 1}, "logprobs=1 asks for log-probabilities"),
]
