"""Facts about the host and the model for the bench's header: CPU, devices and versions
(through :mod:`llamabatch._ffi.sysinfo`), the model file's quantization and size.

:func:`collect_header` gives the ``"header"`` of the JSON document (its keys are listed
in :mod:`llamabatch.measure.report`).
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

# -- header --------------------------------------------------------------------------------
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|F16|BF16|F32|MXFP4)(?![A-Za-z0-9])", re.IGNORECASE
)

#: ``enum llama_ftype`` (llama.h) for the common values of ``general.file_type``.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4",
}


def quantization(model_path: str, metadata: Mapping[str, str] | None = None) -> str:
    """The quantization: GGUF ``general.file_type`` if known, else from the file name."""
    raw = (metadata or {}).get("general.file_type")
    if raw is not None:
        try:
            return FILE_TYPES.get(int(raw), f"file_type {int(raw)}")
        except ValueError:
            pass
    found = _QUANT_RE.findall(os.path.basename(model_path))
    return found[-1].upper() if found else "unknown"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def library_versions() -> tuple[str, str]:
    """``(llama-cpp-python version, llama.cpp version)``, ``"unknown"`` when not found."""
    try:
        import llama_cpp

        binding = getattr(llama_cpp, "__version__", "unknown")
    except (ImportError, OSError):
        return "not installed", "unknown"
    from .._ffi import sysinfo

    llama, ggml, commit = sysinfo.llama_version(), sysinfo.ggml_version(), sysinfo.ggml_commit()
    extra = ", ".join(x for x in (ggml and f"ggml {ggml}", commit and f"commit {commit}") if x)
    if llama is None and not extra:
        return binding, "unknown"
    return binding, f"{llama or 'unknown'}" + (f" ({extra})" if extra else "")


def collect_header(
    *,
    model_path: str,
    metadata: Mapping[str, str] | None = None,
    threads: int | None = None,
    n_gpu_layers: int = 0,
    n_ctx_seq: int | None = None,
    n_batch: int = 512,
    with_library: bool = True,
) -> dict[str, Any]:
    """The header of the JSON document (see :mod:`llamabatch.measure.report`).

    Args:
        model_path: the GGUF file.
        metadata: ``llm.metadata`` (GGUF key/values as strings), if loaded.
        threads: threads given to llama.cpp (``None``: its defaults).
        n_gpu_layers: layers offloaded (0 none, -1 all).
        n_ctx_seq: tokens per sequence of the batch context, as allocated.
        n_batch: tokens per decode.
        with_library: ask llama.cpp for devices and versions (False for a fake backend).
    """
    meta = metadata or {}
    devices: list[dict[str, Any]] = []
    system_info = None
    binding_version, llama_version = "n/a", "n/a"
    if with_library:
        from .._ffi import sysinfo

        devices = [
            {
                "name": d.name,
                "description": d.description,
                "type": d.type,
                "memory_total": d.memory_total,
            }
            for d in sysinfo.devices()
        ]
        system_info = sysinfo.system_info()
        binding_version, llama_version = library_versions()
    has_gpu = any(d["type"] in ("GPU", "IGPU") for d in devices)
    try:
        size = os.path.getsize(model_path)
    except OSError:
        size = None
    return {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(),
        "cpu_count": cpu_count(),
        "threads": threads,
        "gpu_offload": bool(has_gpu and n_gpu_layers != 0),
        "n_gpu_layers": n_gpu_layers,
        "devices": devices,
        "system_info": system_info,
        "model_path": str(model_path),
        "model_name": meta.get("general.name"),
        "model_arch": meta.get("general.architecture"),
        "model_size_bytes": size,
        "quantization": quantization(str(model_path), meta),
        "n_ctx_seq": n_ctx_seq,
        "n_batch": n_batch,
        "llama_cpp_python_version": binding_version,
        "llama_cpp_version": llama_version,
    }
