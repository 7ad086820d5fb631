"""`python -m bench.http_edge`: what the HTTP edge alone costs, per request.

The real API app (``ApiContainer``, every middleware, routing, parsing, problem mapping,
encoding) in-process over raw ASGI, with stub use cases that do constant work, so only the
edge is measured. Prints the best of five rounds, in requests per CPU-second (CPU time is
far less disturbed by a shared machine than wall time). No database, no network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from dependency_injector import providers

from retsu.adapters.memory.clock import ManualClock
from retsu.application.messages import MessageService
from retsu.domain.message import DeliveredMessage, Priority
from retsu.entrypoints.containers import ApiContainer, memory_storage
from retsu.entrypoints.settings import build_settings

MESSAGE_ID = uuid.uuid4()
DELIVERED = DeliveredMessage(
    id=MESSAGE_ID,
    payload="hello world",
    priority=Priority.HIGH,
    receipt_handle=str(uuid.uuid4()),
    delivery_attempts=1,
    enqueued_at=datetime.now(UTC),
)


class StubMessages(MessageService):
    """Constant work: only the HTTP edge around it is measured."""

    def __init__(self) -> None:
        pass

    async def enqueue(self, cmd: Any) -> list[uuid.UUID]:
        return [MESSAGE_ID]

    async def dequeue(self, cmd: Any) -> list[DeliveredMessage]:
        return [DELIVERED]

    async def acknowledge(self, cmd: Any) -> int:
        return 1


def build_app() -> Any:
    settings = build_settings(
        {"cache": {"distributed": {"enabled": False}, "in_memory": {"enabled": False}}}
    )
    container = ApiContainer(settings=settings)
    clock = ManualClock()
    container.core.clock.override(providers.Object(clock))
    container.storage.override(memory_storage(clock))
    container.use_cases.messages.override(providers.Object(StubMessages()))
    return container.app(on_startup=[], on_shutdown=[])


async def call(app: Any, method: str, path: str, body: bytes | None) -> int:
    headers = [(b"host", b"bench")]
    if body is not None:
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
    messages = [{"type": "http.request", "body": body or b"", "more_body": False}]
    status = 0

    async def receive() -> Any:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("bench", 80),
    }
    await app(scope, receive, send)
    return status


async def measure(requests: int) -> dict[str, int]:
    app = build_app()
    queue = uuid.uuid4()
    routes = {
        "enqueue": (
            f"/v1/queues/{queue}/messages",
            json.dumps({"payload": "hello world", "priority": "HIGH"}).encode(),
        ),
        "dequeue": (f"/v1/queues/{queue}/messages/dequeue", None),
        "acknowledge": (
            f"/v1/queues/{queue}/messages/{MESSAGE_ID}/acknowledge",
            json.dumps({"receipt_handle": DELIVERED.receipt_handle}).encode(),
        ),
    }
    results = {}
    for name, (path, body) in routes.items():
        for _ in range(300):  # warm-up
            assert await call(app, "POST", path, body) in (200, 201, 204)
        best = 0.0
        for _ in range(5):
            start = time.process_time()
            for _ in range(requests):
                await call(app, "POST", path, body)
            best = max(best, requests / (time.process_time() - start))
        results[name] = round(best)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="per round (default 5000)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.requests))))


if __name__ == "__main__":
    main()
