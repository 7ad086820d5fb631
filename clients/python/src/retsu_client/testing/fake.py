"""``FakeRetsu``: the server's own application in process, served to httpx through a
transport (``server.py`` runs it)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from retsu.adapters.system import SystemClock
from retsu.application.ports import Clock
from retsu.entrypoints.settings import ConfigError

from retsu_client.testing.server import InProcessServer

if TYPE_CHECKING:
    from types import TracebackType

    from retsu_client.aio import AsyncClient
    from retsu_client.client import Client

__all__ = ["FAKE_URL", "FakeRetsu", "FakeToken", "FakeTransport"]

FAKE_URL = "http://retsu.fake"

# Lookups read the storage straight through (no Redis here; the in-process name cache
# only saves work, and a test should never wonder whether it sees a cached answer).
NO_CACHES: dict[str, Any] = {
    "cache": {"distributed": {"enabled": False}, "in_memory": {"enabled": False}}
}


@dataclass(frozen=True)
class FakeToken:
    """A bearer token the fake accepts (the server's ``auth.tokens``): ``scopes`` ⊆
    {messages, read, admin}."""

    name: str
    secret: str
    scopes: frozenset[str] | Sequence[str]


class FakeRetsu:
    """The Retsu server in process: its own app, use cases and rules, on its memory
    adapter and a clock the test may move, served through ``transport()``.

        fake = FakeRetsu(clock=ManualClock())
        with fake.client() as retsu:           # or Client(transport=fake.transport())
            retsu.create_queue("emails", visibility_timeout_seconds=30)
            ...
            fake.clock.advance(31)             # the lease ends without sleeping

    ``tokens`` turns auth on. ``history_interval_seconds`` is the state-metrics collector's
    interval: a history snapshot is taken at the first request once that much of the
    fake's clock has passed since the last. The expired-message cleaner does not run by
    itself: call ``clean_expired()``. ``close()`` (or ``with FakeRetsu() as fake:``) shuts
    the app down; a fake nobody closes is shut down when it is garbage-collected.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        tokens: Iterable[FakeToken] | None = None,
        history_interval_seconds: int = 15,
    ) -> None:
        self.clock: Any = clock if clock is not None else SystemClock()
        self.history_interval_seconds = history_interval_seconds
        settings: dict[str, Any] = {
            **NO_CACHES,
            "worker": {
                "queue": {
                    "state_metrics_collector": {
                        "collection_interval_seconds": history_interval_seconds
                    }
                }
            },
        }
        if tokens is not None:
            settings["auth"] = {
                "enabled": True,
                "tokens": [
                    {"name": t.name, "secret": t.secret, "scopes": list(t.scopes)} for t in tokens
                ],
            }
        try:
            self._server = InProcessServer(self.clock, settings)
        except ConfigError as error:  # e.g. an unknown scope: the server's own check
            raise ValueError(str(error)) from None
        self._finalizer = weakref.finalize(self, self._server.close)
        self._finalizer.atexit = False  # its thread is a daemon: nothing to wait for

    # --- public helpers -----------------------------------------------------------------

    def transport(self) -> FakeTransport:
        """An httpx transport (sync and async) that serves this fake."""
        return FakeTransport(self)

    def client(self, **kwargs: Any) -> Client:
        from retsu_client.client import Client

        return Client(FAKE_URL, transport=self.transport(), **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncClient:
        from retsu_client.aio import AsyncClient

        return AsyncClient(FAKE_URL, transport=self.transport(), **kwargs)

    def clean_expired(self) -> int:
        """Run the server's expired-message cleaner until its batches come back short:
        how many rows it removed (expired messages, and the Idempotency-Keys, consumers
        and history snapshots past their retention)."""
        return self._server.call(self._server.clean_expired())

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> FakeRetsu:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class FakeTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Serves a ``FakeRetsu`` to ``httpx.Client`` and ``httpx.AsyncClient`` alike: each
    request runs on the fake's own event loop (a sync caller's thread waits for it, an
    async caller awaits it on whichever loop it runs)."""

    def __init__(self, fake: FakeRetsu) -> None:
        self.fake = fake  # keeps the fake (and its app) alive while a client uses it

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        server = self.fake._server
        return server.call(server.respond(request))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        server = self.fake._server
        return await asyncio.wrap_future(server.submit(server.respond(request)))
