"""The ``with`` block of every object that holds something to free: one mixin."""

from __future__ import annotations

from typing import TypeVar

_C = TypeVar("_C", bound="Closing")


class Closing:
    """Mixin: ``with obj:`` gives ``obj`` and calls its ``close()`` when the block ends, however
    it ends. The class defines ``close()``."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define close()")

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
