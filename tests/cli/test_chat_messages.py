"""``messages`` input: the model's own chat template (GGUF metadata), as llama-cpp-python's
chat handlers apply it, generation prompt appended."""

from __future__ import annotations

import pytest
from cli_util import FAST, read_jsonl, run_cli, single_error_line, write_jsonl

from llamabatch.chat import ChatTemplate, ChatTemplateError, chat_prompt

#: SmolLM2's template adds this system turn when the messages have none.
SMOL_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n"
)
FRUIT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Name a fruit."},
]
FRUIT_CHATML = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n"
)
COLOUR = [{"role": "user", "content": "Name a colour."}]
COLOUR_CHATML = SMOL_SYSTEM + "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"


class _StubLlama:
    """What ChatTemplate.from_llama reads from a Llama: metadata, EOS/BOS ids and texts."""

    def __init__(self, metadata: dict[str, str]) -> None:
        self.metadata = metadata

    def token_eos(self) -> int:
        return 2

    def token_bos(self) -> int:
        return 1

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        return {1: b"<s>", 2: b"</s>"}[tokens[0]]


def test_the_template_gets_bos_and_eos_texts_and_the_generation_prompt():
    stub = _StubLlama(
        {
            "tokenizer.chat_template": "{{ bos_token }}{% for m in messages %}"
            "[{{ m.role }}]{{ m.content }}"
            "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]"
            "{% endif %}"
        }
    )
    assert ChatTemplate.from_llama(stub).render(COLOUR) == (
        "<s>[user]Name a colour.</s>[assistant]"
    )


def test_a_model_without_a_template_is_a_clear_error():
    with pytest.raises(ChatTemplateError, match=r"no chat template .*tokenizer.chat_template"):
        ChatTemplate.from_llama(_StubLlama({}))


def test_a_template_that_is_not_jinja_is_a_clear_error():
    with pytest.raises(ChatTemplateError, match="not valid Jinja"):
        ChatTemplate("{% for %}")


def test_a_template_error_while_rendering_is_a_value_error():
    with pytest.raises(ValueError, match="the chat template failed: .*no element 3"):
        ChatTemplate("{{ messages[3].content }}").render(COLOUR)


@pytest.mark.real_model
def test_smollm2_template_renders_chatml_with_its_default_system_turn(llm):
    template = ChatTemplate.from_llama(llm)
    assert template.render(FRUIT) == FRUIT_CHATML
    assert template.render(COLOUR) == COLOUR_CHATML
    assert chat_prompt(COLOUR, template) == COLOUR_CHATML
    assert chat_prompt(COLOUR, template, llm) == llm.tokenize(
        COLOUR_CHATML.encode(), add_bos=False, special=True
    )


@pytest.mark.real_model
def test_messages_complete_like_the_hand_written_chatml_prompt(capsys, tmp_path, model_path):
    src = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": "fruit-messages", "messages": FRUIT},
            {"id": "fruit-prompt", "prompt": FRUIT_CHATML},
            {"id": "colour-messages", "messages": COLOUR},
            {"id": "colour-prompt", "prompt": COLOUR_CHATML},
        ],
    )
    out_path = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys,
        "complete",
        src,
        "-o",
        out_path,
        "--model",
        model_path,
        "--slots",
        "2",
        "--quiet",
        *FAST,
    )
    assert code == 0, err
    records = read_jsonl(out_path)
    assert [r["id"] for r in records] == [
        "fruit-messages",
        "fruit-prompt",
        "colour-messages",
        "colour-prompt",
    ]
    for with_messages, with_prompt in (records[0:2], records[2:4]):
        assert with_messages["error"] is None and with_messages["n_tokens"] >= 1
        for key in ("text", "finish_reason", "n_prompt_tokens", "n_tokens"):
            assert with_messages[key] == with_prompt[key]


@pytest.fixture(scope="module")
def model_without_template(model_path, tmp_path_factory):
    """A copy of the test model whose tokenizer.chat_template key is renamed away."""
    data = model_path.read_bytes()
    key = b"tokenizer.chat_template"
    assert data.count(key, 0, 16 << 20) == 1  # in the header, before the tensors
    path = tmp_path_factory.mktemp("gguf") / "no-template.gguf"
    path.write_bytes(data.replace(key, b"tokenizer.chat_templatX", 1))
    return path


@pytest.mark.real_model
def test_messages_with_a_model_without_a_template_stop_the_job(
    capsys, tmp_path, model_without_template
):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "Hi"}, {"messages": COLOUR}])
    out_path = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys,
        "complete",
        src,
        "-o",
        out_path,
        "--skip-bad",
        "--model",
        model_without_template,
        *FAST,
    )
    assert code == 2
    assert single_error_line(err).endswith(
        'in.jsonl:2: line 2 has "messages", but the model has no chat template in its GGUF '
        'metadata (tokenizer.chat_template); give ready "prompt" strings instead of '
        '"messages"'
    )
    assert out_path.read_text() == ""


def _parts(*texts: str) -> list[dict]:
    return [{"type": "text", "text": t} for t in texts]


def test_content_as_text_parts_is_read_as_the_joined_text_and_an_image_is_named(tmp_path):
    from llamabatch.cli.job.input import read_prompts

    request = {
        "custom_id": "r1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": [{"role": "user", "content": _parts("Name a", "fruit.")}]},
    }
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    bad = {**request, "custom_id": "r2"}
    bad["body"] = {"messages": [{"role": "user", "content": [*_parts("Look:"), image]}]}
    src = write_jsonl(tmp_path / "in.jsonl", [request, bad])
    good, refused = read_prompts(src, skip_bad=True)
    assert good.messages == [{"role": "user", "content": "Name a\nfruit."}]
    assert request["body"]["messages"][0]["content"] == _parts("Name a", "fruit.")  # untouched
    assert refused.id == "r2"
    assert '"messages"[0]["content"][1] is a \'image_url\' part; only text parts' in refused.error


@pytest.mark.real_model
def test_text_parts_complete_like_the_same_text_as_a_string(capsys, tmp_path, model_path):
    def line(custom_id: str, content: object) -> dict:
        messages = [{"role": "user", "content": content}]
        body = {"messages": messages, "max_tokens": 4, "temperature": 0}
        return {"custom_id": custom_id, "url": "/v1/chat/completions", "body": body}

    def reply(name: str, content: object) -> dict:
        """The response body of a job of one line (each on a fresh context: two equal
        prompts in one batch may part at a near tie, design.md "Numerics")."""
        src = write_jsonl(tmp_path / f"{name}.jsonl", [line(name, content)])
        out_path = tmp_path / f"{name}.out.jsonl"
        argv = ["complete", src, "-o", out_path, "--model", model_path]
        code, _, err = run_cli(capsys, *argv, "--output-format", "openai", "--quiet", *FAST)
        assert code == 0, err
        return read_jsonl(out_path)[0]["response"]["body"]

    parts, text = reply("parts", _parts("Name a", "fruit.")), reply("text", "Name a\nfruit.")
    assert parts["choices"] == text["choices"] and parts["usage"] == text["usage"]
