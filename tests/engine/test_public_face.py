"""The public face: ``llamabatch.__all__`` holds what a user calls (and the base error),
every exception llamabatch defines derives from ``LlamaBatchError`` and lives in
``llamabatch.errors`` (the command line's in ``llamabatch.cli.errors``), and a custom
backend needs only ``llamabatch.engine``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing

import llamabatch
from llamabatch import errors
from llamabatch.cli import errors as cli_errors

#: Exceptions defined elsewhere on purpose, and why.
ELSEWHERE = {
    # control flow inside the engine: the scheduler catches it, it never leaves
    "llamabatch.engine.slot_engine.BatchFailed",
    # a BaseException on purpose, so that no ``except Exception`` of the engine swallows it
    "llamabatch.testing.rules.FakeBackendViolation",
    # a private ValueError of the input reader, turned into a UsageError there
    "llamabatch.cli.job.input._Bad",
}
#: Modules that need what the fake-backend tests do not install (a real binding, httpx).
SKIP_IMPORT_ERRORS = ("llama_cpp", "httpx", "hypothesis")


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(llamabatch.__path__, "llamabatch."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:  # an optional dependency; its module is checked elsewhere
            assert exc.name and exc.name.split(".")[0] in SKIP_IMPORT_ERRORS, exc
            continue
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_exception_derives_from_llamabatch_error_and_lives_in_errors() -> None:
    found = _defined_exceptions()
    assert ELSEWHERE <= set(found)
    homes = {errors.__name__, cli_errors.__name__}
    misplaced = [n for n in found if n not in ELSEWHERE and n.rsplit(".", 1)[0] not in homes]
    assert misplaced == []
    outside = [n for n, cls in found.items() if n not in ELSEWHERE]
    assert all(issubclass(found[n], errors.LlamaBatchError) for n in outside)
    assert {"PoolUnavailable", "ServerFault", "ItemRejected", "BadItem"} <= set(vars(errors))


def test_all_holds_what_a_user_calls_and_the_errors_live_in_their_module() -> None:
    assert set(llamabatch.__all__) == {
        "BatchConfig",
        "BatchGenerator",
        "ChatTemplate",
        "Completion",
        "KvEstimate",
        "LlamaBatchError",
        "Sample",
        "SamplingParams",
        "Stats",
        "TuneReport",
        "create_chat_completions",
        "create_completions",
        "llm_lock",
        "tune",
    }
    assert all(hasattr(llamabatch, name) for name in llamabatch.__all__)
    errors_named = [n for n in llamabatch.__all__ if n.endswith("Error")]
    assert errors_named == ["LlamaBatchError"]  # the base; every error in llamabatch.errors


def test_a_custom_backend_needs_only_the_engine_package() -> None:
    import llamabatch.engine as engine

    for name in ("Backend", "BackendInfo", "BatchLimits", "Vocab", "SeqState", "Span"):
        assert name in engine.__all__ and hasattr(engine, name), name
    for name in ("StepResult", "SeqOutput", "SlotMemory"):
        assert name in engine.__all__, name


def test_the_backend_contract_is_fifteen_typed_members_none_returning_any() -> None:
    from llamabatch.engine import Backend

    members = sorted(n for n in vars(Backend) if not n.startswith("_"))
    assert len(members) == 15, members  # docs/engine.md, "The backend contract"
    for name in members:
        member = getattr(Backend, name)
        fn = member.fget if isinstance(member, property) else member
        assert typing.get_type_hints(fn)["return"] is not typing.Any, name
