"""What the pool gives back: :class:`RemoteCompletion` (a :class:`~llamabatch.Completion`
with ``path == "remote"``) and the counters of a :class:`RemoteGenerator`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..completion import Completion


@dataclass(frozen=True, slots=True)
class RemoteCompletion(Completion):
    """A :class:`~llamabatch.Completion` made in another process: by a server of a pool
    (``path == "remote"``), or by a Ray actor (read back from its output block: ``path`` is
    the actor's, ``server`` ``""``).

    ``token_ids`` is empty unless the server sent token ids (llama-cpp-python's and
    llama-server's OpenAI endpoints do not), so :attr:`n_tokens` is the server's
    ``usage.completion_tokens``; a Ray actor sends them (``llamabatch complete --ray``).
    ``finish_reason`` is ``"length"`` when the server says so, ``"stop"`` for any other
    reason, ``"error"`` with ``error`` set when the item failed. ``n_prompt_tokens`` is
    ``usage.prompt_tokens``.

    Attributes:
        server: URL of the server that answered (the last one tried for an error, ``""``
            when none was).
        attempts: requests sent for this item (1 unless servers failed).
        n_completion_tokens: ``usage.completion_tokens`` (0 when absent).
    """

    server: str = ""
    attempts: int = 0
    n_completion_tokens: int = 0

    @property
    def n_tokens(self) -> int:
        """Generated tokens: ``len(token_ids)`` when sent, else ``usage.completion_tokens``."""
        return len(self.token_ids) or self.n_completion_tokens


@dataclass(slots=True)
class RemoteStats:
    """Counters of one :class:`RemoteGenerator`.

    Attributes:
        items: items finished; items_failed: of those, ``finish_reason == "error"``.
        requests: requests sent; retries: requests sent again after a server fault.
        prompt_tokens, generated_tokens: from the servers' ``usage``.
        servers: per server URL, requests sent and faults (``{"requests", "faults"}``).
    """

    items: int = 0
    items_failed: int = 0
    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    servers: dict[str, dict[str, int]] = field(default_factory=dict)


def error_completion(index: int, message: str, server: str, attempts: int) -> RemoteCompletion:
    """The completion of an item that failed: ``finish_reason == "error"``."""
    return RemoteCompletion(
        index, "", (), "error", message, 0, "remote", server=server, attempts=attempts
    )
