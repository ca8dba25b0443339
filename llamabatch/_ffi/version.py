"""Which llama-cpp-python versions llamabatch supports (docs/compatibility.md), read from the
package metadata without loading a library. ``LLAMABATCH_ALLOW_UNTESTED_LLAMA_CPP=1``
lets another version through."""

from __future__ import annotations

import importlib
import os
import re

from ..errors import LibraryError

#: (lowest, highest) llama-cpp-python release that passed the compatibility matrix.
SUPPORTED: tuple[tuple[int, int, int], tuple[int, int, int]] = ((0, 3, 26), (0, 3, 36))

#: Environment variable that lets an untested version through.
ALLOW_ENV = "LLAMABATCH_ALLOW_UNTESTED_LLAMA_CPP"


def supported_range() -> str:
    """The range as pip writes it, e.g. ``">=0.3.26,<=0.3.36"``."""
    low, high = (".".join(map(str, v)) for v in SUPPORTED)
    return f">={low},<={high}"


def installed_version() -> str | None:
    """The installed llama-cpp-python's version, ``None`` if it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:  # e.g. a source checkout on sys.path
        try:
            package = importlib.import_module("llama_cpp")
        except ImportError:
            return None
        found = getattr(package, "__version__", None)
        return str(found) if found else None


def parse(text: str) -> tuple[int, int, int] | None:
    """``"0.3.36"``, ``"0.3.36+cu124"`` → ``(0, 3, 36)``; ``None`` when not X.Y.Z-shaped."""
    match = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def check_version(text: str | None = None) -> None:
    """Raise ``LibraryError`` when llama-cpp-python is not installed, or when ``text`` (default:
    the installed version) is outside :data:`SUPPORTED`, naming it, the range and
    :data:`ALLOW_ENV`, unless that is set to a non-empty value other than ``0``."""
    text = installed_version() if text is None else text
    if text is None:
        raise LibraryError(
            "llama-cpp-python is not installed; llamabatch supports "
            f"llama-cpp-python{supported_range()}: "
            f"pip install 'llama-cpp-python{supported_range()}'"
        )
    if os.environ.get(ALLOW_ENV, "") not in ("", "0"):
        return
    parsed = parse(text)
    low, high = SUPPORTED
    if parsed is None or not low <= parsed <= high:
        raise LibraryError(
            f"llama-cpp-python {text} is not supported: llamabatch was tested with "
            f"llama-cpp-python{supported_range()} (install one of those, e.g. "
            f"pip install 'llama-cpp-python{supported_range()}'; or set {ALLOW_ENV}=1 "
            "to try this version anyway)"
        )
