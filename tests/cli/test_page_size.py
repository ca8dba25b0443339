"""``--page-size`` and ``--lookahead``: ``--page-size`` is the page of a pool of servers
and of Ray (``--slots`` plays no part in it); a local run writes pages of ``--slots``
items and refuses it. The inputs hold only a malformed line, written as its error
(``--skip-bad``), so no model or server is reached."""

from __future__ import annotations

from llamabatch.cli.main import main


def _no_prompt(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("not a prompt\n", encoding="utf-8")
    return str(path)


def test_page_size_with_a_server_is_not_checked_against_slots(tmp_path, capsys) -> None:
    args = ["complete", _no_prompt(tmp_path), "--skip-bad", "--server", "http://127.0.0.1:9"]
    code = main([*args, "--page-size", "10", "--slots", "4"])
    assert code == 0, capsys.readouterr().err


def test_page_size_without_a_server_or_ray_is_refused(tmp_path, capsys) -> None:
    """Failed before: locally --page-size was a deprecated second name of --lookahead."""
    args = ["complete", _no_prompt(tmp_path), "--skip-bad", "--slots", "2"]
    assert main([*args, "--page-size", "4"]) == 2
    assert "--page-size is the page of --server and --ray" in capsys.readouterr().err
    assert main([*args, "--lookahead", "3"]) == 2
    assert "--lookahead 3 is out of range" in capsys.readouterr().err
