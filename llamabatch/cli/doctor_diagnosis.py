"""What ``llamabatch doctor`` concludes from a step's process: pure functions, no llama.cpp.

- :func:`cpu_flags`: the CPU feature flags of ``/proc/cpuinfo`` (x86 ``flags``, Arm
  ``Features``);
- :func:`death`: how a step's process ended, naming the signal that killed it;
- :func:`amx_on_vm`: the known crash of a native llama.cpp build on a CPU that
  advertises Intel AMX inside a VM that does not enable the tile state (llama.cpp
  repacks the weights for AMX at load, then its first AMX tile instruction faults; public
  reports: ollama/ollama#17249, ollama/ollama#17006, ggml-org/llama.cpp#20824), and
  :func:`rebuild_command`, the fix: llama-cpp-python built with AMX code generation off;
- :func:`allocated_kv`: the KV cache size llama.cpp logs when it creates a context.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path

#: Environment variable naming a file read instead of ``/proc/cpuinfo`` (``scripts/
#: setup-venv`` reads the same one): lets the AMX path be exercised on any machine.
CPUINFO_ENV = "LLAMABATCH_CPUINFO"

#: Compiler flags that turn off AMX code generation (GCC/Clang ``-mno-*`` ISA options).
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

#: Signals a faulting native instruction raises (general protection fault: SIGSEGV).
FAULT_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGILL, signal.SIGBUS})

#: Log lines that show llama.cpp put weights into its AMX buffer type: the repack
#: (``ggml_backend_amx_buffer_set_tensor: amx repack tensor ...``, debug level) or the
#: buffer of the load summary (``load_tensors: AMX model buffer size = ...``).
_AMX_LOG = re.compile(r"amx repack|\bAMX\b[^\n]*buffer", re.IGNORECASE)

#: ``llama_kv_cache: size =   45.00 MiB (  512 cells,  30 layers,  4/4 seqs), ...``
_KV_LINE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +\d+ layers, +(\d+)/")


def cpu_flags(path: str | os.PathLike[str] | None = None) -> frozenset[str]:
    """The CPU flags of the first processor in ``path`` (default: ``$LLAMABATCH_CPUINFO``,
    else ``/proc/cpuinfo``); empty when the file cannot be read (not Linux)."""
    if path is None:
        path = os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo"
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


def has_amx(flags: frozenset[str]) -> bool:
    """The CPU advertises AMX tiles (``amx_tile``)."""
    return "amx_tile" in flags


@dataclass(frozen=True, slots=True)
class Death:
    """How a step's process ended.

    Attributes:
        signal: the signal that killed it (``None`` when it exited).
        exit_status: its exit status (``None`` when a signal killed it).
    """

    signal: signal.Signals | None
    exit_status: int | None

    @property
    def text(self) -> str:
        """E.g. ``"died by signal SIGSEGV (Segmentation fault)"`` or ``"exit status 1"``."""
        if self.signal is None:
            return f"exit status {self.exit_status}"
        description = signal.strsignal(self.signal) or self.signal.name
        return f"died by signal {self.signal.name} ({description})"


def death(returncode: int) -> Death:
    """A ``subprocess`` return code as a :class:`Death` (negative = killed by signal -rc)."""
    if returncode < 0:
        try:
            return Death(signal.Signals(-returncode), None)
        except ValueError:  # a real-time signal without a name
            return Death(None, returncode)
    return Death(None, returncode)


def amx_on_vm(died: Death, log: str, flags: frozenset[str]) -> bool:
    """The crash looks like AMX on a VM: a faulting signal, a CPU that advertises AMX,
    and llama.cpp's log showing weights repacked for AMX."""
    return died.signal in FAULT_SIGNALS and has_amx(flags) and bool(_AMX_LOG.search(log))


def rebuild_command(python: str, version: str | None, cmake_args: str | None) -> str:
    """The shell command that reinstalls llama-cpp-python ``version`` built from source
    with AMX off (``CFLAGS``/``CXXFLAGS`` :data:`NO_AMX_FLAGS`; ``cmake_args``, the
    user's ``CMAKE_ARGS`` of a GPU build, kept as it is)."""
    flags = shlex.quote(NO_AMX_FLAGS)
    env = f"CFLAGS={flags} CXXFLAGS={flags}"
    if cmake_args:
        env = f"CMAKE_ARGS={shlex.quote(cmake_args)} {env}"
    requirement = "llama-cpp-python" + (f"=={version}" if version else "")
    return (
        f"{env} {shlex.quote(python)} -m pip install --force-reinstall --no-deps "
        f"--no-cache-dir --no-binary llama-cpp-python {shlex.quote(requirement)}"
    )


@dataclass(frozen=True, slots=True)
class LoggedKv:
    """The last ``llama_kv_cache: size = ...`` line of a log.

    Attributes:
        bytes: the size, from MiB with two decimals (so within 0.005 MiB).
        cells: KV cells per sequence stream (= ``n_ctx_seq`` of a non-unified cache).
        seqs: sequences it holds.
    """

    bytes: int
    cells: int
    seqs: int


def allocated_kv(log: str) -> LoggedKv | None:
    """The KV cache the last context created in ``log`` allocated; ``None`` when the log
    has no such line (llama.cpp's logging off, or another wording)."""
    found = _KV_LINE.findall(log)
    if not found:
        return None
    mib, cells, seqs = found[-1]
    return LoggedKv(round(float(mib) * 2**20), int(cells), int(seqs))
