"""Assertions and a raw ASGI caller shared by the HTTP tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from httpx import Response
from litestar import Litestar
from litestar.testing import AsyncTestClient

Client = AsyncTestClient[Litestar]
NewQueue = Callable[..., Awaitable[dict[str, Any]]]

PROBLEM = "application/problem+json"
MISSING_ID = "01890a5d-ac96-774b-bcce-b302099a8057"


def assert_problem(response: Response, status: int, code: str) -> dict[str, Any]:
    """The response is a problem+json of that status and code; returns the body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert body["type"] == "about:blank"
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert set(body) == {"type", "title", "status", "detail", "code"}
    assert response.headers.get("x-request-id")
    return body


async def raw_request(
    app: Litestar,
    method: str,
    path: str,
    headers: Sequence[tuple[bytes, bytes]],
    chunks: Sequence[bytes],
    query: bytes = b"",
) -> tuple[int, dict[bytes, bytes], bytes]:
    """Call the ASGI app directly, streaming the body in chunks (no Content-Length needed)."""
    messages = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ] or [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        # The client stays: as uvicorn, nothing more until the connection closes (an
        # http.disconnect here would be a client that left: a dequeue answers it 499).
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [
            *([] if any(name == b"host" for name, _ in headers) else [(b"host", b"testserver")]),
            *headers,
        ],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)  # type: ignore[arg-type]
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body
