"""The README and the documentation site: the README stays short and names the test
command `.ci/run` runs, no page speaks of issues or deadlines (history belongs in
CHANGELOG.md), the site builds with ``mkdocs build --strict``, and every public name of
``llamabatch`` is in its API reference."""

from __future__ import annotations

import dataclasses
import html
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import llamabatch

ROOT = Path(__file__).resolve().parents[2]
TEST_COMMAND = ".venv/bin/python -m pytest -ra"
PAGES = sorted((ROOT / "docs").glob("**/*.md")) + [ROOT / "README.md"]

#: Words of the project's history, not of the software: "issue 11", "issue #3",
#: "before the deadline".
HISTORY = re.compile(r"\bissues? #?\d+|\bdeadline", re.IGNORECASE)


def test_the_readme_is_at_most_150_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150


def test_ci_runs_exactly_the_readmes_test_command():
    assert TEST_COMMAND in (ROOT / "README.md").read_text(encoding="utf-8")
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert ci[-1] == TEST_COMMAND


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_speaks_of_issues_or_deadlines(page):
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        found = HISTORY.search(line)
        assert found is None, f"{page.name}:{number}: {found.group(0)!r} belongs in CHANGELOG.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (.ci/run does)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strictly_with_every_public_name_in_the_reference(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    missing = [n for n in llamabatch.__all__ if f'id="llamabatch.{n}"' not in reference]
    assert missing == []
    assert (site / "index.html").is_file() and (site / "doctor" / "index.html").is_file()


def test_code_blocks_name_their_language_for_the_stylesheet(site):
    # docs/css/extra.css wraps the printed lines of console and JSON blocks by that class
    page = (site / "index.html").read_text(encoding="utf-8")
    assert '<div class="language-console highlight">' in page
    css = (ROOT / "docs" / "css" / "extra.css").read_text(encoding="utf-8")
    assert ".language-console pre > code" in css and "white-space: pre-wrap" in css


#: Words of this project's own machinery, not of the software: the pages are for users.
MACHINERY = re.compile(
    r"device tool|\bsessions?\b|\bcarry:|`carry`|\bcarried\b|give_back|can_start_another"
    r"|/work/|/root/|\bH200\b|\bengineers?\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_speaks_of_the_projects_own_machines(page):
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        found = MACHINERY.search(line)
        assert found is None, f"{page.name}:{number}: {found.group(0)!r} is not for users"


def _section(reference: str, name: str) -> str:
    """The HTML of the reference's entry for ``llamabatch.<name>``, up to the next entry."""
    start = reference.index(f'id="llamabatch.{name}"')
    end = reference.find('<h2 id="llamabatch.', start + 1)
    return reference[start : end if end > 0 else None]


def _text(html_text: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html_text)))


def test_the_reference_shows_signatures_with_defaults_and_every_sampling_field(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    generator = _text(_section(reference, "BatchGenerator"))
    assert "BatchGenerator( llm: object = None, *," in generator
    assert 'slots: int | Literal["auto"] = 4' in generator and "max_tokens: int = 200" in generator
    sampling = _section(reference, "SamplingParams")
    assert "temperature: float = 0.8" in _text(sampling)
    undocumented = [
        f.name
        for f in dataclasses.fields(llamabatch.SamplingParams)
        if f"<code>{f.name}</code>" not in sampling and f">{f.name}<" not in sampling
    ]
    assert undocumented == []
    assert "one_at_a_time" not in _text(_section(reference, "tune")).split("Returns")[0]


def _signature(section: str) -> str:
    """The text of an entry's first signature, its line breaks kept."""
    # the block's classes: [language-python] doc-signature highlight
    found = re.search(r'<div class="[^"]*\bdoc-signature\b[^"]*"><pre>(.*?)</pre>', section, re.S)
    assert found is not None, "an entry without a signature"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def test_the_docs_extra_holds_a_signature_formatter():
    # mkdocstrings formats the signatures with ruff or black; without either each one
    # renders as one line that the page cuts off
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    docs = re.search(r"^docs = (.*)$", pyproject, re.MULTILINE)
    assert docs is not None and re.search(r'"(ruff|black)\b', docs.group(1)), docs


def test_signatures_are_formatted_one_parameter_a_line(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    lines = _signature(_section(reference, "BatchGenerator")).splitlines()
    assert lines[0] == "BatchGenerator(", "unformatted signature: ruff or black is missing"
    assert '    slots: int | Literal["auto"] = 4,' in lines
    assert "    max_tokens: int = 200," in lines
    assert max(map(len, lines)) <= 80


def _module_constants() -> dict[str, object]:
    import llamabatch.measure.tune
    import llamabatch.model  # noqa: F401

    return {
        name: value
        for module_name, module in list(sys.modules.items())
        if module_name.split(".")[0] == "llamabatch"
        for name, value in vars(module).items()
        if re.fullmatch(r"[A-Z][A-Z0-9_]+", name)
    }


def test_defaults_show_their_values_not_the_names_of_constants(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    shown = set(re.findall(r"= ([A-Z][A-Z0-9_]{2,})\b", _text(reference)))
    shown |= set(re.findall(r"<td>\s*<code>([A-Z][A-Z0-9_]{2,})</code>\s*</td>", reference))
    constants = _module_constants()
    unknown = sorted(shown - constants.keys())
    assert unknown == [], "defaults named after no constant of llamabatch"
    plain = sorted(n for n in shown if isinstance(constants[n], (int, float, str, bytes)))
    assert plain == []
    generator = _text(_section(reference, "BatchGenerator"))
    assert "max_batch_failures: int = 3" in generator


def _row(table_html: str, name: str) -> str:
    for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table_html, re.DOTALL):
        if re.search(rf"<code>(?:<[^>]+>)*{name}(?:<[^>]+>)*</code>", row.split("</td>")[0]):
            return row
    raise AssertionError(f"no row for {name}")


def test_every_sampling_field_shows_its_default(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    sampling = _section(reference, "SamplingParams")
    wrong = {}
    for field in dataclasses.fields(llamabatch.SamplingParams):
        cells = re.findall(r"<td>(.*?)</td>", _row(sampling, field.name), re.DOTALL)
        if _text(cells[-1]).strip() != repr(field.default):
            wrong[field.name] = _text(cells[-1]).strip()
    assert wrong == {}


def _entries(reference: str):
    """(object, the HTML of its entry) for every entry of the reference."""
    heads = [
        (found.start(), found.group(1))
        for found in re.finditer(
            r'<h\d id="(llamabatch\.[\w.]+)" class="doc doc-heading', reference
        )
    ]
    for (start, path), (end, _) in zip(heads, heads[1:] + [(len(reference), "")]):
        parts = path.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        yield path, obj, reference[start:end]


def _test_hooks() -> dict[str, tuple[str, ...]]:
    spec = importlib.util.spec_from_file_location("roles", ROOT / "scripts/griffe_sphinx_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TEST_HOOKS


def test_every_parameters_table_names_every_parameter(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    hooks = _test_hooks()
    missing = {}
    for path, obj, entry in _entries(reference):
        table = re.search(r"Parameters:</span></p>\s*<table>.*?</table>", entry, re.DOTALL)
        if table is None or not callable(obj):
            continue
        real = f"{obj.__module__}.{obj.__qualname__}"
        names = [
            p.name
            for p in inspect.signature(obj).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.name not in ("self", *hooks.get(real, ()))
        ]
        absent = [n for n in names if not re.search(rf"<code>{n}</code>", table.group(0))]
        if absent:
            missing[path] = absent
    assert missing == {}


def test_every_returns_and_yields_section_is_one_item(site):
    # one value comes back: a table row per docstring line would split its description
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    sections = re.findall(
        r">(?:Returns|Yields):</span></p>\s*<table>(.*?)</table>", reference, re.DOTALL
    )
    rows = [section.count('<tr class="doc-section-item">') for section in sections]
    assert len(rows) >= 5 and set(rows) == {1}, rows


def test_public_names_come_before_the_errors_and_no_private_base_shows(site):
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    order = [reference.index(f'id="llamabatch.{n}"') for n in ("BatchGenerator", "Stats")]
    assert order[0] < order[1] < reference.index('id="llamabatch.errors.DecodeError"')
    assert "Bases:" not in reference and "Closing" not in _text(reference)


def test_no_built_page_shows_a_sphinx_role(site):
    roles = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`?")
    shown = [
        str(page.relative_to(site))
        for page in site.glob("**/*.html")
        if roles.search(_text(page.read_text(encoding="utf-8")))
    ]
    assert shown == []


def test_docs_paths_in_docstrings_are_links_to_the_pages(site):
    # "docs/engine.md" in a docstring is a file of the checkout; on the site, a link
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"docs/[\w-]+\.md", _text(reference)) == []
    generator = _section(reference, "BatchGenerator")
    assert re.search(r'<a href="\.\./reliability-rules/">[^<]+</a>', generator)


def _nav() -> list:
    import yaml

    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]


def test_no_page_of_the_nav_follows_a_section():
    # with navigation.sections a page after a section shows as if it were in that section
    kinds = ["section" if isinstance(v, list) else "page" for e in _nav() for v in e.values()]
    first_section = kinds.index("section")
    assert "page" not in kinds[first_section:]


def test_the_gpu_page_is_beside_getting_started():
    def pages(section: list) -> list[str]:
        return [v for e in section for v in e.values() if isinstance(v, str)]

    sections = [v for e in _nav() for v in e.values() if isinstance(v, list)]
    (with_gpu,) = [pages(s) for s in sections if "gpu.md" in pages(s)]
    assert "getting-started.md" in with_gpu
