"""Chat messages to a prompt with the model's own chat template (GGUF
``tokenizer.chat_template``), rendered and tokenized as llama-cpp-python's chat handlers do.
llama_cpp is imported only when a template is built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ChatTemplateError, LibraryError

#: The GGUF metadata key of the default chat template.
TEMPLATE_KEY = "tokenizer.chat_template"


def check_messages(value: object) -> list[dict[str, Any]]:
    """Check chat messages: a non-empty list of objects whose ``role`` (not empty) is a
    string and whose ``content`` is a string or, as OpenAI's chat and Batch APIs also write
    it, a list of text parts (``{"type": "text", "text": ...}``), joined with newlines as
    vLLM and llama-server join them; other keys kept. Returns new dicts (the caller's are
    left as they are); ValueError saying what is wrong, naming the message (and a part
    that is not text) by its 0-based index."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f'"messages" is {_json_type(value)}, not a list of {{"role", "content"}} objects'
        )
    if not value:
        raise ValueError('"messages" is an empty list')
    checked: list[dict[str, Any]] = []
    for k, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise ValueError(
                f'"messages"[{k}] is {_json_type(message)}, not an object with "role" and "content"'
            )
        message = dict(message)
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(f'"messages"[{k}] has no "{key}"')
        if isinstance(message["content"], list):
            message["content"] = _joined_text(k, message["content"])
        for key in ("role", "content"):
            if not isinstance(message[key], str):
                what = "a string or a list of text parts" if key == "content" else "a string"
                raise ValueError(
                    f'"messages"[{k}]["{key}"] is {_json_type(message[key])}, not {what}'
                )
        if not message["role"].strip():
            raise ValueError(f'"messages"[{k}]["role"] is empty')
        checked.append(message)
    return checked


def _joined_text(k: int, parts: list[Any]) -> str:
    """The text of a message whose content is a list of parts (only text parts)."""
    texts = []
    for j, part in enumerate(parts):
        where = f'"messages"[{k}]["content"][{j}]'
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            what = f"a {kind!r} part" if isinstance(kind, str) else _json_type(part)
            raise ValueError(
                f'{where} is {what}; only text parts ({{"type": "text", "text": ...}}) '
                "can be given to this model"
            )
        if not isinstance(part.get("text"), str):
            raise ValueError(f'{where}["text"] is {_json_type(part.get("text"))}, not a string')
        texts.append(part["text"])
    return "\n".join(texts)


def _json_type(value: object) -> str:
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


class ChatTemplate:
    """A chat template (Jinja source) rendered with llama-cpp-python's ``Jinja2ChatFormatter``,
    built as ``Llama.__init__`` builds its chat handler (``eos_token``, ``bos_token``: those
    tokens' texts), generation prompt appended.

    Raises:
        ChatTemplateError: the template is not valid Jinja.
        LibraryError: llama-cpp-python (with jinja2) cannot be imported.
    """

    def __init__(self, template: str, *, eos_token: str = "", bos_token: str = "") -> None:
        try:
            import jinja2
            from llama_cpp import llama_chat_format
        except (ImportError, OSError) as exc:
            raise LibraryError(
                f"cannot import llama_cpp.llama_chat_format (pip install llama-cpp-python): {exc}"
            ) from exc

        self.template = template
        self._jinja_error = jinja2.TemplateError
        try:
            self._formatter: Any = llama_chat_format.Jinja2ChatFormatter(
                template=template,
                eos_token=eos_token,
                bos_token=bos_token,
                add_generation_prompt=True,
            )
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(
                f"the model's chat template is not valid Jinja: {exc}"
            ) from None

    @classmethod
    def from_llama(cls, llm: Any) -> ChatTemplate:
        """The default chat template of a loaded ``llama_cpp.Llama``; ChatTemplateError when its
        metadata has none or it is not valid Jinja."""
        template = (getattr(llm, "metadata", None) or {}).get(TEMPLATE_KEY)
        if not template:
            raise ChatTemplateError(
                f"the model has no chat template in its GGUF metadata "
                f'({TEMPLATE_KEY}); give ready "prompt" strings '
                'instead of "messages"'
            )
        return cls(
            template,
            eos_token=_token_text(llm, llm.token_eos()),
            bos_token=_token_text(llm, llm.token_bos()),
        )

    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt for ``messages``; ValueError when the template refused them (its
        ``raise_exception``, e.g. "roles must alternate", or a Jinja error)."""
        try:
            return self._formatter(messages=list(messages)).prompt
        except self._jinja_error as exc:
            raise ValueError(f"the chat template failed: {exc}") from None
        except (ValueError, TypeError, LookupError, ArithmeticError) as exc:
            raise ValueError(f"the chat template refused the messages: {exc}") from None


def _token_text(llm: Any, token_id: int) -> str:
    """A token's text in the vocabulary, as ``Llama.__init__`` passes it to templates."""
    if token_id < 0:
        return ""
    model = getattr(llm, "_model", None)
    if model is not None and hasattr(model, "token_get_text"):
        return model.token_get_text(token_id)
    return llm.detokenize([token_id], special=True).decode("utf-8", errors="replace")


def chat_prompt(messages: object, template: ChatTemplate, llm: Any = None) -> str | list[int]:
    """The prompt of a chat: ``messages`` checked (:func:`check_messages`) and rendered with
    ``template``; with ``llm`` (a ``llama_cpp.Llama``) its token ids as llama-cpp-python's
    chat handlers make them (``tokenize(add_bos=False, special=True)``: the template writes
    its own BOS), else the text. The one chat -> tokens path (generator, command line).

    Raises:
        ValueError: the messages are malformed or the template refused them.
    """
    text = template.render(check_messages(messages))
    if llm is None:
        return text
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))
