"""Find the binding and the symbols llamabatch needs on the installed llama-cpp-python: the
binding's own functions, current name first; a missing one is a :class:`Missing` stub
that raises ``LibraryError`` naming every candidate and the version."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import LibraryError
from ..params import STAGES
from .version import check_version, installed_version

#: Role → candidate names in ``llama_cpp.llama_cpp``, newest first (llama.h names).
CANDIDATES: dict[str, tuple[str, ...]] = {
    "context_default_params": ("llama_context_default_params",),
    "init_context": ("llama_init_from_model", "llama_new_context_with_model"),
    "free_context": ("llama_free",),
    "n_ctx": ("llama_n_ctx",),
    "n_ctx_seq": ("llama_n_ctx_seq",),  # optional: else n_ctx // n_seq_max
    "n_seq_max": ("llama_n_seq_max",),
    "n_batch": ("llama_n_batch",),
    "get_model": ("llama_get_model",),
    "max_parallel_sequences": ("llama_max_parallel_sequences",),  # optional
    "decode": ("llama_decode",),
    "batch_init": ("llama_batch_init",),
    "batch_free": ("llama_batch_free",),
    "get_logits_ith": ("llama_get_logits_ith",),
    "set_abort_callback": ("llama_set_abort_callback",),  # optional
    "perf_context": ("llama_perf_context",),  # optional: graph reuse counter
    "model_get_vocab": ("llama_model_get_vocab",),
    "vocab_n_tokens": ("llama_vocab_n_tokens", "llama_n_vocab"),
    "vocab_is_eog": ("llama_vocab_is_eog", "llama_token_is_eog"),
    "chain_default_params": ("llama_sampler_chain_default_params",),
    "chain_init": ("llama_sampler_chain_init",),
    "chain_add": ("llama_sampler_chain_add",),
    "chain_n": ("llama_sampler_chain_n",),
    "chain_get": ("llama_sampler_chain_get",),
    "sampler_name": ("llama_sampler_name",),
    "sampler_sample": ("llama_sampler_sample",),
    "sampler_free": ("llama_sampler_free",),
    "init_penalties": ("llama_sampler_init_penalties",),
    # the sampled chain's stages (llamabatch.params.STAGES), and greedy
    **{f"init_{stage.init}": (f"llama_sampler_init_{stage.init}",) for stage in STAGES},
    "init_greedy": ("llama_sampler_init_greedy",),
    # optional: copying one sequence's cache (prefix sharing, recurrent snapshots)
    "state_seq_get_size": ("llama_state_seq_get_size",),
    "state_seq_get_data": ("llama_state_seq_get_data",),
    "state_seq_set_data": ("llama_state_seq_set_data",),
    # optional: memories that cannot be cut back to a position
    "model_is_recurrent": ("llama_model_is_recurrent",),
    "model_is_hybrid": ("llama_model_is_hybrid",),
    # optional: sliding-window models (which cached prefixes the window still holds)
    "model_n_swa": ("llama_model_n_swa",),
    "memory_seq_pos_min": ("llama_memory_seq_pos_min",),
    "kv_self_seq_pos_min": ("llama_kv_self_seq_pos_min",),
    "init_grammar": ("llama_sampler_init_grammar",),  # optional: grammar / json / choices
    "sampler_apply": ("llama_sampler_apply",),  # optional: grammar checked lazily
    "sampler_accept": ("llama_sampler_accept",),  # optional: idem
    # optional: backend sampling (a chain attached to a context samples on its device)
    "set_sampler": ("llama_set_sampler",),
    "sampler_copy": ("llama_sampler_copy",),
    "synchronize": ("llama_synchronize",),  # optional: a step's decode time, compute included
}

#: Memory API generations (llama.h): prefix, then the clear / seq_rm / seq_pos_max names.
#: ``llama_memory_*`` take the ``llama_memory_t`` of ``llama_get_memory(ctx)``; the two
#: older ones take the context itself, and their ``clear`` has no ``data`` argument.
MEMORY_APIS: tuple[tuple[str, str, str, str], ...] = (
    ("llama_memory", "llama_memory_clear", "llama_memory_seq_rm", "llama_memory_seq_pos_max"),
    ("llama_kv_self", "llama_kv_self_clear", "llama_kv_self_seq_rm", "llama_kv_self_seq_pos_max"),
    (
        "llama_kv_cache",
        "llama_kv_cache_clear",
        "llama_kv_cache_seq_rm",
        "llama_kv_cache_seq_pos_max",
    ),
)


def import_binding() -> tuple[ModuleType, str]:
    """Import ``llama_cpp.llama_cpp`` (loads the shared library); the module and its version.
    LibraryError when it is not installed, outside the supported range or does not load."""
    check_version()
    try:
        module = importlib.import_module("llama_cpp.llama_cpp")
    except ImportError as exc:
        raise LibraryError(
            f"llama-cpp-python is not installed ({exc}); "
            "install it with `pip install llama-cpp-python`"
        ) from exc
    except (OSError, RuntimeError) as exc:  # the binding's "Failed to load shared library"
        raise LibraryError(f"llama-cpp-python's shared library failed to load: {exc}") from exc
    return module, _version()


def _version() -> str:
    return installed_version() or "(unknown version)"


@dataclass(frozen=True, slots=True)
class Missing:
    """Stands for a symbol the installed binding lacks; calling it raises ``LibraryError``."""

    names: tuple[str, ...]
    version: str

    def __call__(self, *args: Any) -> Any:
        raise LibraryError(self.message())

    def message(self) -> str:
        return (
            f"llama-cpp-python {self.version} has no {' / '.join(self.names)} "
            "(needed by llamabatch)"
        )


#: (prefix, llama_get_memory or None, clear, seq_rm, seq_pos_max).
MemoryFns = tuple[str, Any, Callable[..., Any], Callable[..., Any], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class Symbols:
    """The resolved functions by role: ``fn`` (role → the binding's function, or a
    :class:`Missing` stub), ``names`` (role → the name found), ``memory`` (the memory API
    generation's functions, stubs when none is complete) and the version."""

    fn: dict[str, Callable[..., Any]]
    names: dict[str, str]
    memory: MemoryFns
    version: str

    def has(self, role: str) -> bool:
        """True when ``role`` resolved to a real function."""
        return role in self.names

    def require(self, *roles: str) -> None:
        """Raise one ``LibraryError`` listing every missing role of ``roles`` (``"memory"``: the
        memory API)."""
        missing = [self.fn[r].message() for r in roles if r != "memory" and not self.has(r)]
        if "memory" in roles and isinstance(self.memory[2], Missing):
            missing.append(self.memory[2].message())
        if missing:
            raise LibraryError("; ".join(missing))


def resolve(module: ModuleType, version: str) -> Symbols:
    """Look every role of :data:`CANDIDATES` and the memory API up in ``module``."""
    fn: dict[str, Callable[..., Any]] = {}
    names: dict[str, str] = {}
    for role, candidates in CANDIDATES.items():
        for name in candidates:
            found = getattr(module, name, None)
            if callable(found):
                fn[role], names[role] = found, name
                break
        else:
            fn[role] = Missing(candidates, version)
    return Symbols(fn=fn, names=names, memory=_resolve_memory(module, version), version=version)


def _resolve_memory(module: ModuleType, version: str) -> MemoryFns:
    get_memory = getattr(module, "llama_get_memory", None)
    for prefix, *names in MEMORY_APIS:
        found = [getattr(module, n, None) for n in names]
        if prefix == "llama_memory" and not callable(get_memory):
            continue
        if all(callable(f) for f in found):
            return (prefix, get_memory if prefix == "llama_memory" else None, *found)
    stub = Missing(tuple(api[2] for api in MEMORY_APIS), version)
    return ("", None, stub, stub, stub)
