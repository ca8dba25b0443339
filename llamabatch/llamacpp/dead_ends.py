"""Grammars that can never be generated, refused before llama.cpp sees them: a NUL character
in a choice or a GBNF string literal, or a character class that matches nothing but NUL.
No token can produce a NUL (llama-grammar.cpp, ``llama_grammar_apply_impl`` and
``decode_utf8``); docs/reliability-rules.md, "Grammar dead ends". Also refused: groups
nested deeper than :data:`MAX_GROUP_DEPTH`, which would overflow the thread's stack in
llama.cpp's parser and kill the process. Pure Python."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import GrammarError

_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
#: GBNF's one-letter escapes (llama-grammar.cpp ``parse_char``); any other escaped
#: character stands for itself here (llama.cpp refuses it when it parses the grammar).
_CHAR_ESCAPES = {"n": 10, "r": 13, "t": 9}
#: The largest code point (Unicode).
MAX_CODE_POINT = 0x10FFFF

WHY = "no token can produce it (llama.cpp's grammar ends a token's text at a NUL)"

#: The most groups ``( ... )`` nested in each other that a grammar may hold. llama.cpp parses
#: each level by recursion (llama-grammar.cpp, ``parse_sequence`` / ``parse_alternates``) and
#: matches it by recursion again (``llama_grammar_advance_stack``), on the stack of the thread
#: that builds the sampler: measured with llama-cpp-python 0.3.36 on x86-64, 20,000 levels
#: killed the process (SIGSEGV) on an 8 MiB stack, 2,000 on a 256 KiB one; 500 passed there.
#: Grammars written by hand or compiled from a JSON schema nest a few levels.
MAX_GROUP_DEPTH = 100


def check_choices(choices: Sequence[str]) -> None:
    """Refuse a choice holding a NUL: GrammarError naming the choice's index and the position."""
    for k, choice in enumerate(choices):
        at = choice.find("\x00")
        if at >= 0:
            raise GrammarError(
                f"choices[{k}]={choice!r} holds a NUL character (U+0000) at position {at}: "
                f"{WHY}; remove it"
            )


def check_literals(grammar: str) -> None:
    """Refuse GBNF text whose string literals hold a NUL, raw or escaped (``\\x00``,
    ``\\u0000``, ``\\U00000000``), with a character class matching no character but NUL
    (a class may name NUL among others), or with groups nested more than
    :data:`MAX_GROUP_DEPTH` deep. Comments are skipped.

    Raises:
        GrammarError: naming the line and column of the NUL, of the class or of the group.
    """
    i, n, depth = 0, len(grammar), 0
    while i < n:
        ch = grammar[i]
        if ch == "(":
            depth += 1
            if depth > MAX_GROUP_DEPTH:
                line, column = _place(grammar, i)
                raise GrammarError(
                    f"the grammar's group at line {line}, column {column} is nested "
                    f"{depth} deep: at most {MAX_GROUP_DEPTH} groups ( ... ) may be nested "
                    "(llama.cpp parses each level by recursion, and a deep grammar "
                    "overflows the thread's stack and kills the process); use rules instead"
                )
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "#":  # a comment, to the end of the line
            while i < n and grammar[i] not in "\r\n":
                i += 1
        elif ch == "[":
            i = _check_class(grammar, i)
        elif ch == '"':
            i += 1
            while i < n and grammar[i] != '"':
                if grammar[i] == "\\" and i + 1 < n:
                    value, width = _escape(grammar, i + 1)
                    if value == 0:
                        _refuse(grammar, i)
                    i += 1 + width
                    continue
                if grammar[i] == "\x00":
                    _refuse(grammar, i)
                i += 1
        elif ch == "\x00":
            _refuse(grammar, i)
        i += 1


def _char(text: str, at: int) -> tuple[int | None, int]:
    """The code point of the class character at ``at`` (``None`` for an escape that is not a
    number) and the characters it spans."""
    if text[at] != "\\" or at + 1 >= len(text):
        return ord(text[at]), 1
    letter = text[at + 1]
    if letter in _HEX_ESCAPES:
        value, width = _escape(text, at + 1)
        return value, 1 + width
    return _CHAR_ESCAPES.get(letter, ord(letter)), 2


def _check_class(text: str, start: int) -> int:
    """Refuse the class ``[...]`` opening at ``start`` when it matches no character but NUL;
    the index of its closing ``]`` (or the end of the text)."""
    i, n = start + 1, len(text)
    negated = i < n and text[i] == "^"
    i += negated
    ranges: list[tuple[int, int]] = []
    while i < n and text[i] != "]":
        low, width = _char(text, i)
        i += width
        high = low
        if i + 1 < n and text[i] == "-" and text[i + 1] != "]":
            high, width = _char(text, i + 1)
            i += 1 + width
        if low is None or high is None:
            return i  # not a number: llama.cpp refuses the grammar itself
        ranges.append((low, high))
    if not _matches_beyond_nul(ranges, negated):
        line, column = _place(text, start)
        raise GrammarError(
            f"the grammar's character class at line {line}, column {column} "
            f"({text[start : i + 1]}) matches no character but NUL (U+0000), so no token "
            "can continue there (llama.cpp would abort the process); widen or remove it"
        )
    return i


def _matches_beyond_nul(ranges: list[tuple[int, int]], negated: bool) -> bool:
    """True when a class of ``ranges`` (``[^...]`` when ``negated``) matches a code point in
    [1, MAX_CODE_POINT]."""
    if not negated:
        return any(high >= 1 and low <= high for low, high in ranges)
    nxt = 1  # the smallest code point not yet covered by the ranges
    for low, high in sorted(ranges):
        if low > nxt:
            return True
        nxt = max(nxt, high + 1)
    return nxt <= MAX_CODE_POINT


def _escape(text: str, at: int) -> tuple[int | None, int]:
    """The code point of the escape whose letter is at ``at`` (``None`` when not a number) and
    the characters it spans after the backslash."""
    letter = text[at]
    digits = _HEX_ESCAPES.get(letter)
    if digits is None:
        return None, 1
    hexa = text[at + 1 : at + 1 + digits]
    try:
        return int(hexa, 16), 1 + len(hexa)
    except ValueError:
        return None, 1  # llama.cpp refuses it when it parses the grammar


def _place(text: str, at: int) -> tuple[int, int]:
    """The line and column (from 1) of ``text[at]``."""
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def _refuse(text: str, at: int) -> None:
    line, column = _place(text, at)
    raise GrammarError(
        f"the grammar's string literal at line {line}, column {column} holds a NUL "
        f"character (U+0000): {WHY}; remove it"
    )
