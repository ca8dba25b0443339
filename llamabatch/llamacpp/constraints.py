"""What a reply may be: ``choices``, ``json_schema`` and ``response_format`` as GBNF text for
``llama_sampler_init_grammar`` (llama.cpp ``grammars/README.md``). Pure Python."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import GrammarError
from .dead_ends import check_choices, check_literals

#: Any JSON object (``response_format: {"type": "json_object"}`` without a ``schema``):
#: llama-cpp-python's ``llama_grammar.JSON_GBNF`` (0.3.36), which its chat handler builds
#: for it (``_grammar_for_response_format``), so that replies are the binding's. Used when
#: that module is not installed; :func:`json_object_grammar` prefers the module's own.
_JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""


def json_object_grammar() -> str:
    """The GBNF text of ``response_format: {"type": "json_object"}``: llama-cpp-python's
    ``llama_grammar.JSON_GBNF`` (what ``create_chat_completion`` uses), or the copy of it
    here when the module is not installed."""
    try:
        from llama_cpp.llama_grammar import JSON_GBNF
    except ImportError:
        return _JSON_GBNF
    return str(JSON_GBNF)


#: One character of a JSON string, as current llama.cpp's converter writes it
#: (``common/json-schema-to-grammar.cpp``, ``PRIMITIVE_RULES`` "char", in the llama.cpp
#: vendored by llama-cpp-python 0.3.36): anything but a quote, a backslash, DEL and the
#: control characters U+0000-U+001F, or an escape. The escapes are llama-cpp-python's
#: (``\/`` included, which JSON allows).
JSON_STRING_CHAR = (
    r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | '
    r'"u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
)

#: llama-cpp-python's rule body for it (``PRIMITIVE_RULES["char"]`` of 0.3.x), used when
#: its module does not expose the table.
_LOOSE_STRING_CHAR = (
    r'[^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
)

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal: quotes, backslashes and control characters escaped
    (``\\n``, ``\\r``, ``\\t``, ``\\xHH``); other characters as they are (UTF-8)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choices_grammar(choices: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are the strings of ``choices`` (``root ::= "a" | "b"``);
    ValueError when ``choices`` is empty or holds an empty string."""
    if not choices or any(not c for c in choices):
        raise ValueError(f"choices={list(choices)!r}: give at least one non-empty string")
    unique = list(dict.fromkeys(choices))
    return "root ::= " + " | ".join(gbnf_literal(c) for c in unique) + "\n"


@functools.lru_cache(maxsize=64)
def _schema_gbnf(schema_json: str) -> str:
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError as exc:
        raise GrammarError(
            f"json_schema needs llama-cpp-python's llama_grammar module ({exc})"
        ) from exc
    try:
        return strict_strings(json_schema_to_gbnf(schema_json))
    except Exception as exc:  # noqa: BLE001 - it asserts, raises KeyError, ... on a bad schema
        raise GrammarError(
            f"json_schema cannot be compiled to a grammar "
            f"(llama_cpp.llama_grammar.json_schema_to_gbnf): "
            f"{type(exc).__name__}: {exc}"
        ) from None


def strict_strings(gbnf: str) -> str:
    """``gbnf`` (the converter's output, one rule per line) with each rule whose body is
    llama-cpp-python's loose string character (which lets raw control characters into JSON
    strings, against RFC 8259 section 7) replaced by :data:`JSON_STRING_CHAR`; names kept."""
    try:
        from llama_cpp.llama_grammar import PRIMITIVE_RULES

        loose = PRIMITIVE_RULES["char"].content
    except (ImportError, KeyError, AttributeError):
        loose = _LOOSE_STRING_CHAR
    lines = []
    for line in gbnf.split("\n"):
        name, sep, body = line.partition(" ::= ")
        lines.append(f"{name} ::= {JSON_STRING_CHAR}" if sep and body == loose else line)
    return "\n".join(lines)


def schema_grammar(schema: Mapping[str, Any] | str) -> str:
    """The GBNF grammar of a JSON schema (a dict or its JSON text), compiled by llama-cpp-python's
    ``json_schema_to_gbnf`` (as ``LlamaGrammar.from_json_schema``), then
    :func:`strict_strings`; cached. GrammarError when it is not valid JSON, nested beyond
    Python's recursion limit, or refused."""
    try:
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise GrammarError(f"json_schema is not valid JSON: {exc}") from None
        if not isinstance(schema, Mapping):
            raise GrammarError(
                f"json_schema is {type(schema).__name__}; a JSON schema is an object"
            )
        text = json.dumps(schema)
    except RecursionError:  # Python's json nests one call per level
        raise GrammarError(
            "json_schema is nested too deeply to be read (Python's recursion limit, "
            f"sys.getrecursionlimit() = {sys.getrecursionlimit()}); give a flatter schema "
            "(e.g. with $defs and $ref)"
        ) from None
    return _schema_gbnf(text)


def grammar_of(params: Any) -> str | None:
    """The grammar text of ``params`` (a :class:`~llamabatch.SamplingParams`): its ``grammar``, or
    the one of its ``json_schema`` or ``choices``; ``None`` if none. GrammarError when the
    json_schema cannot be compiled, or a NUL no token can produce (:mod:`.dead_ends`)."""
    if params.grammar is not None:
        check_literals(params.grammar)
        return params.grammar
    if params.json_schema is not None:
        text = schema_grammar(params.json_schema)
        check_literals(text)  # e.g. a "const" holding a NUL
        return text
    if params.choices is not None:
        check_choices(params.choices)
        return choices_grammar(params.choices)
    return None


def response_format_fields(response_format: object) -> dict[str, Any]:
    """The :class:`~llamabatch.SamplingParams` fields an OpenAI ``response_format`` stands for:
    ``{}`` for ``{"type": "text"}``, ``{"grammar": json_object_grammar()}`` for
    ``json_object`` (with a ``schema``: ``{"json_schema": schema}``, as llama-cpp-python
    reads it), ``{"json_schema": schema}`` for ``json_schema``. ValueError, naming what is
    valid, for anything else."""
    if not isinstance(response_format, Mapping):
        raise ValueError(
            f"response_format must be an object such as "
            f'{{"type": "json_object"}}, not {json.dumps(response_format)}'
        )
    kind = response_format.get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        schema = response_format.get("schema")  # llama-cpp-python also reads this key
        if isinstance(schema, Mapping):
            return {"json_schema": dict(schema)}
        return {"grammar": json_object_grammar()}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise ValueError(
                'response_format {"type": "json_schema"} needs '
                '"json_schema": {"name": ..., "schema": {...}}'
            )
        return {"json_schema": dict(schema)}
    raise ValueError(
        f'response_format type {json.dumps(kind)} is not one of "text", '
        '"json_object", "json_schema"'
    )
