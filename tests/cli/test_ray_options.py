"""The Ray options of ``llamabatch complete`` are checked before any work (no Ray, no
model needed)."""

from __future__ import annotations

import pytest
from cli_util import run_cli, single_error_line


@pytest.mark.parametrize(
    "args, named",
    [
        (["--actors", "2"], "--actors needs --ray"),
        (["--gpus-per-actor", "1"], "--gpus-per-actor needs --ray"),
        (["--ray", "--actors", "0"], "--actors 0 is out of range"),
        (["--ray", "--gpus-per-actor", "-1"], "--gpus-per-actor -1.0 is out of range"),
        (["--ray", "--server", "http://127.0.0.1:9"], "--ray and --server"),
    ],
)
def test_bad_ray_options_exit_2_naming_them(capsys, prompts_file, args, named):
    code, _, err = run_cli(capsys, "complete", prompts_file, *args)
    assert code == 2 and named in single_error_line(err), err
