"""The supported llama-cpp-python range: declared once, enforced where llama.cpp starts.

``import llamabatch`` never looks at llama-cpp-python; importing the real backend
(``llamabatch.llamacpp``) refuses a version outside the range with a LibraryError that
names it. A fake ``llama_cpp_python-X.dist-info`` first on ``sys.path`` stands for an
installed version X in a child interpreter (``importlib.metadata`` reads the first one).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamabatch._ffi.version import ALLOW_ENV, SUPPORTED, check_version, supported_range
from llamabatch.errors import LibraryError

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_declares_exactly_the_supported_range():
    text = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r'"llama-cpp-python([<>=!~][^"]*)"', text).group(1)
    assert declared == supported_range() == ">=0.3.26,<=0.3.36"


@pytest.mark.parametrize("version", ["0.3.26", "0.3.30", "0.3.36", "0.3.36+cu124"])
def test_versions_in_the_range_pass(version):
    check_version(version)


@pytest.mark.parametrize("version", ["0.3.16", "0.3.25", "0.2.90", "0.3.37", "0.4.0", "dev"])
def test_versions_outside_the_range_are_refused_with_the_range_named(version, monkeypatch):
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(LibraryError) as info:
        check_version(version)
    message = str(info.value)
    assert f"llama-cpp-python {version} is not supported" in message
    assert supported_range() in message and ALLOW_ENV in message


def test_the_escape_hatch_lets_an_untested_version_through(monkeypatch):
    monkeypatch.setenv(ALLOW_ENV, "1")
    check_version("0.3.99")
    monkeypatch.setenv(ALLOW_ENV, "0")
    with pytest.raises(LibraryError):
        check_version("0.3.99")


def run_with_installed_version(tmp_path: Path, version: str, code: str):
    info = tmp_path / f"llama_cpp_python-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {version}\n"
    )
    env_code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); " + code
    return subprocess.run(
        [sys.executable, "-c", env_code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_an_old_version_fails_at_import_of_the_real_backend_not_of_llamabatch(tmp_path):
    low = ".".join(map(str, SUPPORTED[0]))
    old = f"{SUPPORTED[0][0]}.{SUPPORTED[0][1]}.{SUPPORTED[0][2] - 1}"
    done = run_with_installed_version(
        tmp_path,
        old,
        (
            "import importlib.metadata as m; "
            f"assert m.version('llama-cpp-python') == {old!r}; "
            "import llamabatch; "
            "assert 'llama_cpp' not in sys.modules; "
            "print('llamabatch imported'); "
            "import llamabatch.llamacpp.backend"
        ),
    )
    assert done.returncode == 1
    assert "llamabatch imported" in done.stdout
    assert "llamabatch.errors.LibraryError" in done.stderr
    assert f"llama-cpp-python {old} is not supported" in done.stderr
    assert f">={low}" in done.stderr
