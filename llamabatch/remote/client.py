"""One HTTP exchange with one server, through httpx: a request's reply, or a probe.

Every outcome is one of three: a :class:`ServerReply`; :class:`ServerFault` (the server
refused the connection, timed out, broke the response off, answered 408, 429 or 5xx,
or sent a body that is not a completion: worth another try on another server); or
:class:`ItemRejected` (any other 4xx: the request itself is bad, so another server
would refuse it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import ItemRejected, ServerFault
from ..shapes.requests import ServerRequest

#: HTTP statuses that say "not now" rather than "never": retried on another server
#: (RFC 9110 408 Request Timeout; RFC 6585 429 Too Many Requests; every 5xx).
RETRY_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class ServerReply:
    """A parsed completion.

    Attributes:
        text: ``choices[0].text`` (completions) or ``choices[0].message.content`` (chat).
        finish_reason: ``"length"`` when the server says so, else ``"stop"``.
        token_ids: ``choices[0].tokens`` when the server sent token ids, else ``()``.
        n_prompt_tokens, n_completion_tokens: ``usage`` (0 when absent).
    """

    text: str
    finish_reason: str
    token_ids: tuple[int, ...]
    n_prompt_tokens: int
    n_completion_tokens: int


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a probe learned: the first model id of ``/v1/models`` and, from llama-server's
    ``/props``, ``total_slots`` (``None`` when the server has no such endpoint)."""

    model: str | None
    total_slots: int | None


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300]
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:300]
        return str(error)[:300]
    return str(body)[:300]


def _usage(body: dict[str, Any], key: str) -> int:
    usage = body.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and value >= 0 else 0


def parse_reply(body: object) -> ServerReply:
    """Read an OpenAI completion or chat completion object.

    Raises:
        ServerFault: the body is not one (no ``choices[0]`` with text or message).
    """
    try:
        choice = body["choices"][0]  # type: ignore[index]
        if "message" in choice:
            text = choice["message"].get("content") or ""
        else:
            text = choice["text"] or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ServerFault(f"the answer is not a completion: {str(body)[:200]}") from None
    tokens = choice.get("tokens")
    token_ids = (
        tuple(tokens)
        if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
        else ()
    )
    reason = "length" if choice.get("finish_reason") == "length" else "stop"
    return ServerReply(
        str(text),
        reason,
        token_ids,
        _usage(body, "prompt_tokens"),
        _usage(body, "completion_tokens"),
    )


def _check_status(response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    message = f"HTTP {status}: {_error_text(response)}"
    if status >= 500 or status in RETRY_STATUSES:
        raise ServerFault(message)
    raise ItemRejected(message)


def send(
    client: httpx.Client, url: str, request: ServerRequest, model: str | None, timeout_s: float
) -> ServerReply:
    """POST one request to the server at ``url`` and parse its answer.

    Args:
        client: the shared httpx client (thread-safe, pools connections).
        url: the server's base URL, without ``/v1``.
        model: the ``model`` field to send (vLLM needs it), or ``None``.
        timeout_s: seconds to wait for the whole reply to start (read timeout).

    Raises:
        ServerFault, ItemRejected: see the module docstring.
    """
    body = dict(request.body, model=model) if model else request.body
    try:
        response = client.post(
            url + request.endpoint,
            json=body,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        )
    except httpx.TimeoutException as exc:
        raise ServerFault(f"timed out ({type(exc).__name__})") from None
    except httpx.TransportError as exc:  # refused, reset, broken off mid-answer
        raise ServerFault(f"{type(exc).__name__}: {exc}") from None
    _check_status(response)
    try:
        answer = response.json()
    except ValueError:
        raise ServerFault(f"the answer is not JSON: {response.text[:200]!r}") from None
    return parse_reply(answer)


def probe(client: httpx.Client, url: str, timeout_s: float) -> ServerInfo:
    """Check that the server answers ``GET /v1/models``, and read its slots from
    llama-server's ``GET /props`` (``total_slots``) when it has that endpoint.

    Raises:
        ServerFault: the server does not answer, or ``/v1/models`` fails
            (``reached`` False when no connection could be made).
    """
    timeout = httpx.Timeout(timeout_s)
    try:
        models = client.get(url + "/v1/models", timeout=timeout)
        if models.status_code != 200:
            raise ServerFault(f"GET /v1/models: HTTP {models.status_code}: {_error_text(models)}")
        props = client.get(url + "/props", timeout=timeout)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ServerFault(f"cannot connect: {type(exc).__name__}: {exc}", reached=False) from None
    except httpx.TransportError as exc:
        raise ServerFault(f"{type(exc).__name__}: {exc}") from None
    model = None
    try:
        data = models.json()["data"]
        model = str(data[0]["id"]) if data else None
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    slots = None
    if props.status_code == 200:
        try:
            value = props.json().get("total_slots")
            slots = value if isinstance(value, int) and value >= 1 else None
        except (ValueError, AttributeError):
            pass
    return ServerInfo(model, slots)
