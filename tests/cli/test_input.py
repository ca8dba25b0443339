"""Input of ``llamabatch complete``: JSONL and text, ids, ``messages``, bad lines, --skip-bad."""

from __future__ import annotations

import json

import pytest
from cli_util import read_jsonl, run_cli, single_error_line
from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch.chat import ChatTemplate
from llamabatch.cli.common import UsageError
from llamabatch.cli.job.input import BadLine, LineItem, apply_chat_template, read_prompts

USER_HI = [{"role": "user", "content": "hi"}]


def test_jsonl_ids_default_to_line_numbers_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"prompt": "a", "id": "x1"}\r\n\r\n'
        b'{"prompt": "b\\nc"}\n   \n{"prompt": "d", "id": 7}\n'
    )
    assert read_prompts(path) == [
        LineItem("x1", "a", 1),
        LineItem(3, "b\nc", 3),
        LineItem(7, "d", 5),
    ]


def test_text_file_one_prompt_per_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("first prompt\n\nsecond {prompt}\r\nthird\u2028same line\n")
    assert read_prompts(path) == [
        LineItem(1, "first prompt", 1, is_text=True),
        LineItem(3, "second {prompt}", 3, is_text=True),
        LineItem(4, "third\u2028same line", 4, is_text=True),
    ]


def test_auto_detects_jsonl_without_the_extension(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text('{"prompt": "a"}\n{"prompt": "b", "id": "q"}\n')
    assert [i.id for i in read_prompts(path)] == [1, "q"]
    assert [i.prompt for i in read_prompts(path, "text")] == [
        '{"prompt": "a"}',
        '{"prompt": "b", "id": "q"}',
    ]


def test_mixed_lines_without_the_extension_are_text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text('{"prompt": "a"}\nplain words\n')
    assert [i.prompt for i in read_prompts(path)] == ['{"prompt": "a"}', "plain words"]


def test_messages_items_keep_their_messages_until_the_template_is_applied(tmp_path):
    path = tmp_path / "in.jsonl"
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a fruit.", "name": "kept"},
    ]
    path.write_text(json.dumps({"id": "m", "messages": messages}) + '\n{"prompt": "p"}\n')
    assert read_prompts(path) == [LineItem("m", None, 1, messages), LineItem(2, "p", 2)]


BAD_LINES = [
    ('{"prompt": "one", "x": ', "malformed JSON"),
    ('["a list"]', "not a JSON object"),
    ('{"id": "x"}', 'neither a "prompt" string nor a "messages" list'),
    ('{"prompt": "a", "messages": []}', 'both "prompt" and "messages"'),
    ('{"prompt": 5}', '"prompt" is int, not a string'),
    ('{"prompt": "a", "id": 1.5}', '"id"'),
    ('{"prompt": "a", "id": true}', '"id"'),
    ('{"prompt": "a", "id": null}', '"id"'),
    ('{"prompt": "a\\ud800"}', "lone surrogate"),
    ('{"prompt": "a", "id": "\\udfff"}', "lone surrogate"),
    ('{"messages": "hi"}', '"messages" is a string, not a list'),
    ('{"messages": []}', '"messages" is an empty list'),
    ('{"messages": ["hi"]}', '"messages"[0] is a string, not an object'),
    ('{"messages": [{"content": "hi"}]}', '"messages"[0] has no "role"'),
    ('{"messages": [{"role": "user"}]}', '"messages"[0] has no "content"'),
    (
        '{"messages": [{"role": "user", "content": null}]}',
        '"messages"[0]["content"] is null, not a string',
    ),
    (
        '{"messages": [{"role": "user", "content": "a"}, {"role": 1, "content": "b"}]}',
        '"messages"[1]["role"] is a number',
    ),
    ('{"messages": [{"role": " ", "content": "hi"}]}', '"messages"[0]["role"] is empty'),
    ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_bad_jsonl_lines_are_named_by_line_number(tmp_path, line, message):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(UsageError) as info:
        read_prompts(path)
    assert str(info.value).startswith(f"{path}:2: line 2: ")
    assert message in str(info.value)
    assert "--skip-bad" in str(info.value)


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_with_skip_bad_a_bad_line_is_kept_in_its_place_with_its_own_id_or_line_number(
    tmp_path, line, message
):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "ok"}\n\n' + line + '\n{"prompt": "last", "id": "z"}\n')
    first, bad, last = read_prompts(path, skip_bad=True)
    assert first == LineItem(1, "ok", 1) and last == LineItem("z", "last", 4)
    own = "x" if line == '{"id": "x"}' else 3  # the only line here with a valid id
    assert isinstance(bad, BadLine) and (bad.id, bad.line) == (own, 3)
    assert bad.error.startswith("line 3: ") and message in bad.error


def test_duplicate_ids_are_named_with_both_lines(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "a", "id": "x"}\n{"prompt": "b"}\n{"prompt": "c", "id": "x"}\n')
    with pytest.raises(UsageError, match=r'duplicate id "x" on lines 1 and 3'):
        read_prompts(path, skip_bad=True)


def test_ids_are_json_values_so_7_and_quoted_7_differ(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "a", "id": 7}\n{"prompt": "b", "id": "7"}\n')
    assert [i.id for i in read_prompts(path)] == [7, "7"]


def test_a_bad_line_whose_number_is_another_items_id_is_a_duplicate(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "a", "id": 2}\nnot json\n')
    with pytest.raises(UsageError, match="duplicate id 2 on lines 1 and 2 .line 2 is malformed"):
        read_prompts(path, skip_bad=True)


def test_invalid_utf8_is_named_by_line_or_skipped(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(UsageError, match="in.txt:2: line 2: not valid UTF-8"):
        read_prompts(path)
    fine, bad = read_prompts(path, skip_bad=True)
    assert fine == LineItem(1, "fine", 1, is_text=True)
    assert bad.id == 2 and bad.error.startswith("line 2: not valid UTF-8")


def test_unknown_format_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="fmt"):
        read_prompts(tmp_path / "in.txt", "csv")


def test_apply_chat_template_renders_or_keeps_the_refused_item_in_its_place(tmp_path):
    template = ChatTemplate(
        "{% for m in messages %}{% if m['role'] == 'bad' %}"
        "{{ raise_exception('no bad roles') }}{% endif %}"
        "<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    entries = [
        LineItem("a", None, 1, USER_HI),
        LineItem("p", "ready", 2),
        LineItem("b", None, 3, [{"role": "bad", "content": "x"}]),
    ]
    with pytest.raises(UsageError, match="in.jsonl:3: line 3: .*no bad roles"):
        apply_chat_template(entries, template, tmp_path / "in.jsonl")
    rendered = apply_chat_template(entries, template, tmp_path / "in.jsonl", skip_bad=True)
    assert rendered[0] == LineItem("a", "<user>hi<assistant>", 1, USER_HI)
    assert rendered[1] == entries[1]
    assert rendered[2] == BadLine(
        "b", 3, "line 3: the chat template refused the messages: no bad roles"
    )


# -- the command: bad lines stop the job before any model work, or become error lines -----


def test_malformed_line_stops_the_job_before_any_model_work(capsys, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "one"}\n\n{"prompt": "two"\n{"prompt": "three"}\n')
    out_path = tmp_path / "out.jsonl"
    code, out, err = run_cli(
        capsys, "complete", path, "-o", out_path, "--model", tmp_path / "no-model.gguf"
    )
    assert code == 2 and out == ""
    line = single_error_line(err)
    assert "in.jsonl:3: line 3: malformed JSON" in line
    assert not out_path.exists()


def test_skip_bad_writes_error_lines_in_place_without_a_model_when_all_are_bad(capsys, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": 1}\n\nnot json\n{"messages": []}\n')
    out_path = tmp_path / "out.jsonl"
    code, out, err = run_cli(
        capsys,
        "complete",
        path,
        "-o",
        out_path,
        "--skip-bad",
        "--model",
        tmp_path / "no-model.gguf",
    )  # never loaded
    assert code == 0, err
    records = read_jsonl(out_path)
    assert [r["id"] for r in records] == [1, 3, 4]
    for r in records:
        assert r["finish_reason"] == "error" and r["text"] == "" and r["n_tokens"] == 0
        assert r["error"].startswith(f"line {r['id']}: ")
    assert "3 items, 3 errors (3 bad input lines)" in err.strip().splitlines()[-1]


_chars = st.characters(codec="utf-8")
_texts = st.text(_chars, max_size=40)
_ids = st.one_of(st.integers(-(10**12), 10**12), st.text(_chars, max_size=8))
_lines = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1, max_size=30
).filter(str.strip)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_ids, _texts), max_size=8, unique_by=lambda pair: json.dumps(pair[0])))
def test_jsonl_round_trip(tmp_path_factory, pairs):
    path = tmp_path_factory.mktemp("rt") / "in.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for item_id, prompt in pairs:
            f.write(json.dumps({"id": item_id, "prompt": prompt}, ensure_ascii=False) + "\n")
    items = read_prompts(path)
    assert [(i.id, i.prompt, i.line) for i in items] == [
        (item_id, prompt, n) for n, (item_id, prompt) in enumerate(pairs, start=1)
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(_lines, max_size=8))
def test_text_round_trip(tmp_path_factory, prompts):
    path = tmp_path_factory.mktemp("rt") / "in.txt"
    path.write_text("".join(p + "\n" for p in prompts), encoding="utf-8", newline="")
    assert [i.prompt for i in read_prompts(path, "text")] == prompts
