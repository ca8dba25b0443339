"""A griffe extension for the documentation site (mkdocs.yml): Sphinx roles in docstrings
(``:class:`Sample```, ``:func:`~llamabatch.model.load_llama```) become cross-references.

The docstrings keep the roles, which ``help()`` and IDEs read as they are; on the site
each role becomes an optional autorefs link to the object's page entry (plain code when
the site has no entry for it). ``~`` shows the last name only, as in Sphinx. The
parameters of TEST_HOOKS (for tests, not for users) are left out of the site, and an
entry that documents several names at once (``max_tokens, n_batch: as for ...``) becomes
one entry per name, so that each parameter gets its row.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import griffe

#: function -> its keyword parameters that only tests pass
TEST_HOOKS = {"llamabatch.tuning.run.tune": ("progress", "backend", "one_at_a_time", "clock")}

SHARED = re.compile(r"^( +)(\w+(?:, \w+)+):(.*\n(?:\1 .+\n)*)", re.MULTILINE)

ROLE = re.compile(
    r":(?:class|func|meth|attr|mod|data|exc|obj|const):`(?P<tilde>~?)(?P<name>[^`]+)`"
)


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


def _rewrite(obj: griffe.Object) -> None:
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
        obj.docstring.value = ROLE.sub(link, text)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _rewrite(pkg)
