"""What llama.cpp says about itself and the devices it sees (for ``llamabatch bench``):
read-only, ``None`` when a symbol is missing. The ggml symbols are resolved through the
binding's libllama with fresh function objects (its declarations stay untouched)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

#: ``enum ggml_backend_dev_type`` (ggml-backend.h), in order.
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")


@dataclass(frozen=True, slots=True)
class Device:
    """One ggml backend device: ``name`` (``"CPU"``, ``"Vulkan0"``, ...), ``description``,
    ``type`` (one of :data:`DEVICE_TYPES`, or ``"type <n>"``), and the bytes of memory it
    reports (``None`` if unknown)."""

    name: str
    description: str
    type: str
    memory_total: int | None = None
    memory_free: int | None = None

    @property
    def is_gpu(self) -> bool:
        """True for a discrete or integrated GPU."""
        return self.type in ("GPU", "IGPU")


def _lib() -> Any | None:
    try:
        import llama_cpp.llama_cpp as binding
    except (ImportError, OSError):
        return None
    return getattr(binding, "_lib", None)


def _func(name: str, restype: Any, *argtypes: Any) -> Any | None:
    lib = _lib()
    if lib is None:
        return None
    try:
        return ctypes.CFUNCTYPE(restype, *argtypes)((name, lib))
    except (AttributeError, OSError):  # symbol absent from this build
        return None


def _text(name: str) -> str | None:
    f = _func(name, ctypes.c_char_p)
    if f is None:
        return None
    raw = f()
    return raw.decode("utf-8", "replace").strip() if raw else None


def system_info() -> str | None:
    """``llama_print_system_info()``: the CPU features llama.cpp was built with."""
    return _text("llama_print_system_info")


def llama_version() -> str | None:
    """``llama_version()`` of libllama (e.g. ``"0.5.0-dev"``)."""
    return _text("llama_version")


def ggml_version() -> str | None:
    """``ggml_version()`` of libggml (e.g. ``"0.25.3"``)."""
    return _text("ggml_version")


def ggml_commit() -> str | None:
    """``ggml_commit()``: the llama.cpp commit the library was built from."""
    return _text("ggml_commit")


def devices() -> list[Device]:
    """The ggml backend devices llama.cpp can use; ``[]`` if the API is not available."""
    count = _func("ggml_backend_dev_count", ctypes.c_size_t)
    get = _func("ggml_backend_dev_get", ctypes.c_void_p, ctypes.c_size_t)
    name = _func("ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p)
    desc = _func("ggml_backend_dev_description", ctypes.c_char_p, ctypes.c_void_p)
    kind = _func("ggml_backend_dev_type", ctypes.c_int, ctypes.c_void_p)
    if None in (count, get, name, desc, kind):
        return []
    memory = _func(
        "ggml_backend_dev_memory",
        None,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    )
    found = []
    for i in range(count()):
        dev = get(i)
        if not dev:
            continue
        t = kind(dev)
        free = total = None
        if memory is not None:
            f, tot = ctypes.c_size_t(0), ctypes.c_size_t(0)
            memory(dev, ctypes.byref(f), ctypes.byref(tot))
            free, total = (f.value or None), (tot.value or None)
        found.append(
            Device(
                name=(name(dev) or b"").decode("utf-8", "replace"),
                description=(desc(dev) or b"").decode("utf-8", "replace"),
                type=DEVICE_TYPES[t] if 0 <= t < len(DEVICE_TYPES) else f"type {t}",
                memory_total=total,
                memory_free=free,
            )
        )
    return found


def supports_gpu_offload() -> bool | None:
    """``llama_supports_gpu_offload()``: the build has a GPU backend."""
    f = _func("llama_supports_gpu_offload", ctypes.c_bool)
    return None if f is None else bool(f())


def host_available_memory() -> int | None:
    """Bytes of host memory available to programs without swapping (psutil's
    ``virtual_memory().available``), or ``None`` if it cannot be read."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError, AttributeError):
        return None
