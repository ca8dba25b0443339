"""Create ./.venv and install llamabatch into it (editable), on any platform: Windows
(PowerShell or cmd), macOS, Linux. Run it with the Python (>= 3.10) the venv is made from:

    python scripts/setup_venv.py [EXTRAS] [--wheel-index NAME] [--venv DIR] [--dry-run]

EXTRAS, e.g. ``test,docs``, installs ``.[test,docs]``. llama-cpp-python 0.3.36 comes
from, in this order:

- ``--wheel-index NAME``: llama-cpp-python's prebuilt wheels of that backend
  (``https://abetlen.github.io/llama-cpp-python/whl/NAME``: ``cpu``, ``cu124``,
  ``vulkan``, ``metal``, ``hip-radeon`` ...; docs/gpu.md); no wheel there for this
  platform and Python stops pip, instead of a silent CPU build from source;
- ``CMAKE_ARGS`` set (``-DGGML_VULKAN=on``, ``-DGGML_CUDA=on`` ...): built from source
  with them (never pip's cached CPU wheel), which needs a C/C++ compiler and cmake;
- else PyPI (pip's cached wheel, or a CPU build from source).

Then it runs ``llamabatch doctor --slots 2 --n-ctx-seq 512`` with the venv's python
(model load, a decode alone, a 2-sequence batch step): its exit status is this script's.
The venv's python is where the venv module puts it (``.venv\\Scripts\\python.exe`` on
Windows, ``.venv/bin/python`` elsewhere); ``--venv DIR`` makes the venv elsewhere.
``--dry-run`` makes the venv and prints the commands instead of running them. The bash
``scripts/setup-venv`` does the same on Linux and macOS and also repairs a build that
dies on Intel AMX inside a VM and patches a Vulkan build for Debian 12's headers
(docs/development.md).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import venv
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
LLAMA_CPP = "llama-cpp-python==0.3.36"
WHEELS = "https://abetlen.github.io/llama-cpp-python/whl/"


class _Builder(venv.EnvBuilder):
    """The venv module's builder, keeping the path of the venv's python it made."""

    python = ""

    def post_setup(self, context: SimpleNamespace) -> None:
        self.python = context.env_exe


def commands(python: str, extras: str, wheel_index: str | None) -> list[list[str]]:
    """The commands run with the venv's ``python``, in order."""
    pip = [python, "-m", "pip", "install", "--quiet"]
    if wheel_index:
        source = ["--only-binary", "llama-cpp-python", "--extra-index-url", WHEELS + wheel_index]
    elif os.environ.get("CMAKE_ARGS"):
        source = ["--force-reinstall", "--no-cache-dir", "--no-binary", "llama-cpp-python"]
    else:
        source = []
    project = f"{ROOT}[{extras}]" if extras else str(ROOT)
    return [
        [*pip, "--upgrade", "pip"],
        [*pip, *source, LLAMA_CPP],
        [*pip, "-e", project],
        [python, "-m", "llamabatch", "doctor", "--slots", "2", "--n-ctx-seq", "512"],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extras", nargs="?", default="", help="e.g. test,docs")
    parser.add_argument("--wheel-index", metavar="NAME", help="cpu, cu124, vulkan, metal ...")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv", help="default: ./.venv")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    builder = _Builder(with_pip=True)
    builder.create(str(args.venv))
    for command in commands(builder.python, args.extras, args.wheel_index):
        print("setup_venv:", shlex.join(command), file=sys.stderr, flush=True)
        if not args.dry_run:
            done = subprocess.run(command, cwd=ROOT, check=False)
            if done.returncode != 0:
                return done.returncode
    print(f"setup_venv: ready: {builder.python}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
