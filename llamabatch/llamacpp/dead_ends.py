"""Grammars that can never be generated, refused before llama.cpp sees them.

A NUL character (U+0000) can never be produced by a token: llama.cpp's grammar stage
gives ``-inf`` to every token whose text is empty or starts with a NUL, and its UTF-8
decoder ends each token's code points with a 0 (llama-grammar.cpp,
``llama_grammar_apply_impl`` and ``decode_utf8``). So a choice or a GBNF string literal
holding a NUL is a dead end at that character: the item is refused with an error naming
the place, up front. (Other dead ends, such as an empty character class, are found
while sampling: :class:`~llamabatch.engine.seq_errors.GrammarDeadEnd`.)

Pure Python, no llama.cpp.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import GrammarError

_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}

WHY = "no token can produce it (llama.cpp's grammar ends a token's text at a NUL)"


def check_choices(choices: Sequence[str]) -> None:
    """Refuse a choice holding a NUL character.

    Raises:
        GrammarError: naming the choice (its index) and the character position.
    """
    for k, choice in enumerate(choices):
        at = choice.find("\x00")
        if at >= 0:
            raise GrammarError(
                f"choices[{k}]={choice!r} holds a NUL character (U+0000) at position {at}: "
                f"{WHY}; remove it"
            )


def check_literals(grammar: str) -> None:
    """Refuse GBNF text whose string literals hold a NUL, raw or escaped (``\\x00``,
    ``\\u0000``, ``\\U00000000``). Character classes (``[...]``) may name NUL among
    other characters (it is then never matched); comments are skipped.

    Raises:
        GrammarError: naming the line and column of the NUL.
    """
    i, n = 0, len(grammar)
    while i < n:
        ch = grammar[i]
        if ch == "#":  # a comment, to the end of the line
            while i < n and grammar[i] not in "\r\n":
                i += 1
        elif ch in '"[':
            close = '"' if ch == '"' else "]"
            i += 1
            while i < n and grammar[i] != close:
                if grammar[i] == "\\" and i + 1 < n:
                    value, width = _escape(grammar, i + 1)
                    if close == '"' and value == 0:
                        _refuse(grammar, i)
                    i += 1 + width
                    continue
                if close == '"' and grammar[i] == "\x00":
                    _refuse(grammar, i)
                i += 1
        elif ch == "\x00":
            _refuse(grammar, i)
        i += 1


def _escape(text: str, at: int) -> tuple[int | None, int]:
    """The code point of the escape whose letter is at ``at`` (``None`` when it is not
    a number) and the characters it spans after the backslash."""
    letter = text[at]
    digits = _HEX_ESCAPES.get(letter)
    if digits is None:
        return None, 1
    hexa = text[at + 1 : at + 1 + digits]
    try:
        return int(hexa, 16), 1 + len(hexa)
    except ValueError:
        return None, 1  # llama.cpp refuses it when it parses the grammar


def _refuse(text: str, at: int) -> None:
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    raise GrammarError(
        f"the grammar's string literal at line {line}, column {column} holds a NUL "
        f"character (U+0000): {WHY}; remove it"
    )
