"""A griffe extension for the documentation site (mkdocs.yml): Sphinx roles in docstrings
(``:class:`Sample```, ``:func:`~llamabatch.model.load_llama```) become cross-references.

The docstrings keep the roles, which ``help()`` and IDEs read as they are; on the site
each role becomes an optional autorefs link to the object's page entry (plain code when
the site has no entry for it). ``~`` shows the last name only, as in Sphinx. The
parameters of TEST_HOOKS (for tests, not for users) are left out of the site, and an
entry that documents several names at once (``max_tokens, n_batch: as for ...``) becomes
one entry per name, so that each parameter gets its row.

Repository paths: ``docs/engine.md`` in a docstring (where ``help()`` reads it as a file
of the checkout) becomes a link to that page of the site, titled as the page is.

Defaults: a default that names a constant (``max_batch_failures=MAX_BATCH_FAILURES``) shows
the constant's value when that is a literal (``3``), and the Attributes of a dataclass whose
documented fields all have defaults (a settings object: ``SamplingParams``) are shown with
a Default column, as parameters are.
"""

from __future__ import annotations

import ast
import re
from html import escape
from pathlib import Path
from typing import Any

import griffe

#: function -> its keyword parameters that only tests pass
TEST_HOOKS = {"llamabatch.measure.tune.tune": ("progress", "backend", "one_at_a_time", "clock")}

SHARED = re.compile(r"^( +)(\w+(?:, \w+)+):(.*\n(?:\1 .+\n)*)", re.MULTILINE)

ROLE = re.compile(
    r":(?:class|func|meth|attr|mod|data|exc|obj|const):`(?P<tilde>~?)(?P<name>[^`]+)`"
)

#: ``docs/PAGE.md`` in a docstring: a page of the site
DOC_PAGE = re.compile(r"(?<![\w/.`])docs/(?P<page>[\w-]+)\.md\b")
DOCS = Path(__file__).resolve().parent.parent / "docs"


def _page_link(match: re.Match[str]) -> str:
    """A link to the site's page of ``docs/PAGE.md``, relative to the reference page (the
    site has directory URLs), titled by the page's first heading."""
    page = match["page"]
    lines = (DOCS / f"{page}.md").read_text(encoding="utf-8").splitlines()
    title = next((line[2:].strip() for line in lines if line.startswith("# ")), page)
    return f"[{title}](../{page}/)"


def _target(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as the docstring of ``obj`` means it."""
    if name.startswith("llamabatch"):
        return name
    scope: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    head, _, rest = name.partition(".")
    while scope is not None:
        try:
            found = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{found}.{rest}" if rest else found
    return name


def _drop_params(obj: griffe.Object, names: tuple[str, ...]) -> None:
    """Leave ``names`` out of the signature and out of the docstring's Args."""
    for name in names:
        del obj.parameters[name]  # type: ignore[attr-defined]
    if obj.docstring is not None:
        entry = re.compile(rf"^( +)(?:{'|'.join(names)}):.*\n(?:\1 .*\n)*", re.MULTILINE)
        obj.docstring.value = entry.sub("", obj.docstring.value + "\n").rstrip("\n")


def _literal(obj: griffe.Object, default: str | griffe.Expr | None) -> str | griffe.Expr | None:
    """The value of the constant that ``default`` names, where it is a literal, else
    ``default`` itself."""
    value = default
    for _ in range(4):  # a constant defined as another constant
        if not isinstance(value, griffe.ExprName):
            break
        try:
            target = obj.modules_collection[value.canonical_path]
            value = (target.final_target if target.is_alias else target).value
        except (KeyError, AttributeError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return default
    try:
        ast.literal_eval(str(value))
    except (ValueError, SyntaxError):
        return default
    return str(value) if value is not default else default


def _is_dataclass(obj: griffe.Object) -> bool:
    return obj.is_class and any(
        d.callable_path in ("dataclasses.dataclass", "dataclass")
        for d in obj.decorators  # type: ignore[attr-defined]
    )


def _attributes_with_defaults(cls: griffe.Object) -> None:
    """Show a settings dataclass's documented fields with their defaults: its Attributes
    section becomes a parameters table titled "Attributes:" (a Default column)."""
    if cls.docstring is None or cls.docstring.parser is None:
        return
    fields = {
        name: member.value
        for name, member in cls.members.items()
        if not member.is_alias and member.is_attribute and member.value is not None
    }
    sections = cls.docstring.parsed  # parsed once here; the site renders this list
    for index, section in enumerate(sections):
        if section.kind is not griffe.DocstringSectionKind.attributes:
            continue
        if not section.value or any(a.name not in fields for a in section.value):
            continue
        sections[index] = griffe.DocstringSectionParameters(
            [
                griffe.DocstringParameter(
                    a.name, description=a.description, annotation=a.annotation, value=fields[a.name]
                )
                for a in section.value
            ],
            title=section.title or "Attributes:",
        )


def _rewrite(obj: griffe.Object) -> None:
    if obj.is_function:
        for parameter in obj.parameters:  # type: ignore[attr-defined]
            parameter.default = _literal(obj, parameter.default)
    if obj.is_attribute and obj.parent is not None and obj.parent.is_class:
        obj.value = _literal(obj, obj.value)  # type: ignore[attr-defined]
    if obj.path in TEST_HOOKS:
        _drop_params(obj, TEST_HOOKS[obj.path])
    if obj.docstring is not None:

        def link(match: re.Match[str]) -> str:
            name = match["name"]
            shown = name.rsplit(".", 1)[-1] if match["tilde"] else name
            target = escape(_target(obj, name), quote=True)
            return f'<autoref identifier="{target}" optional><code>{escape(shown)}</code></autoref>'

        def split(match: re.Match[str]) -> str:
            indent, names, text = match[1], match[2].split(", "), match[3]
            return "".join(f"{indent}{name}:{text}" for name in names)

        text = SHARED.sub(split, obj.docstring.value + "\n").rstrip("\n")
        obj.docstring.value = DOC_PAGE.sub(_page_link, ROLE.sub(link, text))
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]
    if _is_dataclass(obj):
        _attributes_with_defaults(obj)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _rewrite(pkg)
