"""``--page-size`` and ``--lookahead``: with a pool of servers ``--page-size`` is the
pool's page and ``--slots`` plays no part in it; locally ``--page-size`` is the former
name of ``--lookahead``. The inputs hold only a malformed line, written as its error
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


def test_page_size_without_a_server_is_the_deprecated_lookahead(tmp_path, capsys) -> None:
    assert (
        main(["complete", _no_prompt(tmp_path), "--skip-bad", "--slots", "2", "--page-size", "4"])
        == 0
    )
    assert "--page-size without --server is deprecated" in capsys.readouterr().err
    assert (
        main(["complete", _no_prompt(tmp_path), "--skip-bad", "--slots", "2", "--page-size", "3"])
        == 2
    )
    assert "--lookahead 3 is out of range" in capsys.readouterr().err


def test_lookahead_and_page_size_together_are_refused_locally(tmp_path, capsys) -> None:
    args = ["complete", _no_prompt(tmp_path), "--lookahead", "8", "--page-size", "8"]
    assert main(args) == 2
    assert "give --lookahead only" in capsys.readouterr().err
