"""OpenAI-compatible fake servers behind one ``httpx.MockTransport`` (no network, no model).

Each fake answers ``/v1/models``, optionally ``/props`` (``total_slots``), and the two
completion endpoints with ``text = "re:" + prompt`` (or the last message's content), so a
test can tell which item a reply belongs to. Behaviour is switched per server by plain
attributes; every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable

import httpx


class FakeServer:
    """One fake server.

    Attributes:
        url: its base URL.
        up: False: every request (probes included) raises ``httpx.ConnectError``.
        total_slots: sent by ``/props``; ``None``: ``/props`` is 404 (llama-cpp-python).
        hook: called with the prompt before answering; may return an ``httpx.Response``
            (sent instead), raise an httpx error, or block.
        served: prompts answered 200, in order; seen: every completion request's prompt.
        in_flight, max_in_flight: completion requests being handled now / at most.
    """

    def __init__(self, url: str, total_slots: int | None = None) -> None:
        self.url, self.total_slots = url, total_slots
        self.up = True
        self.hook: Callable[[str], httpx.Response | None] | None = None
        self.served: list[str] = []
        self.seen: list[str] = []
        self.bodies: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(
                200, json={"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
            )
        if path == "/props":
            if self.total_slots is None:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, json={"total_slots": self.total_slots})
        body = json.loads(request.content)
        chat = path == "/v1/chat/completions"
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        with self.lock:
            self.seen.append(prompt)
            self.bodies.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            answer = self.hook(prompt) if self.hook else None
            if isinstance(answer, httpx.Response):
                return answer
            if not self.up:
                raise httpx.RemoteProtocolError("server disconnected", request=request)
            text = "re:" + prompt
            choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            choice.update(index=0, finish_reason="length" if "long" in prompt else "stop")
            with self.lock:
                self.served.append(prompt)
            return httpx.Response(
                200,
                json={
                    "object": "chat.completion" if chat else "text_completion",
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": len(prompt),
                        "completion_tokens": 2,
                        "total_tokens": len(prompt) + 2,
                    },
                },
            )
        finally:
            with self.lock:
                self.in_flight -= 1


class FakeServers:
    """Several fakes on one transport: ``client`` goes to :class:`RemoteGenerator`."""

    def __init__(self, n: int, total_slots: int | None = None) -> None:
        self.servers = [FakeServer(f"http://10.0.0.{i + 1}:8080", total_slots) for i in range(n)]
        self.client = httpx.Client(transport=httpx.MockTransport(self._handle))

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def _handle(self, request: httpx.Request) -> httpx.Response:
        url = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        return next(s for s in self.servers if s.url == url).handle(request)

    def served_counts(self) -> Counter:
        """How many times each prompt was answered 200, over all servers."""
        return Counter(p for s in self.servers for p in s.served)
