"""Noticing that the client of a request has gone, for the dequeue route (SPEC §3.1: a
dequeue whose client has gone never keeps what it claimed).

The ASGI server says so with an ``http.disconnect`` message from ``receive()``. uvicorn
(httptools) answers a ``receive()`` made after the whole body was read only when the
connection closes (``http.disconnect`` at once) or when the response is complete; so one
task waiting on ``receive()`` for the length of the handler sets the event as soon as the
connection is lost — a FIN from the client (its process stopped or was killed: the kernel
closes its sockets) or a reset. The body is read whole before the task starts (the route's
``data`` was parsed from it already), so the watcher never takes a byte of it; and it is
cancelled before the handler returns, so the ``http.disconnect`` uvicorn answers once the
response is complete is never mistaken for the client leaving. Its cost, one task per
dequeue (created and cancelled): 12-18 µs on uvloop (best of 7 × 50,000 on the shared
test machine), under 1 % of the ~3 ms of API CPU a dequeue + ack takes
(docs/performance.md).

What cannot be told (a delivery then stays claimed until its lease ends, its attempt
counted, as when a consumer dies after receiving a message):

* the client leaving after the last look, right after a claim returned, and before the
  answer is written: nothing in between waits on the network, so only a disconnect that
  the event loop learns in that same instant — within one of its turns — is missed (uvicorn
  then drops the answer silently: its ``send`` raises nothing after a disconnect);
* the client leaving after the answer was written to the socket: the bytes sit in the
  kernels' buffers, and TCP has no receipt for what the peer's application read, so this is
  indistinguishable from a client that read the answer and then died;
* a proxy in front that keeps its upstream request running after its own client went
  (nginx closes it, ``proxy_ignore_client_abort off``, its default): then the API sees a
  client that stays.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from litestar import Request
from litestar.types import Receive

__all__ = ["client_departure", "departure_of"]


async def _watch(receive: Receive, gone: asyncio.Event) -> None:
    message = await receive()
    if message["type"] == "http.disconnect":
        gone.set()
    # Anything else: this server tells no more about the connection (uvicorn answers
    # nothing but http.disconnect once the body was read), so the request is served as
    # though the client stayed.


@contextlib.asynccontextmanager
async def client_departure(request: Request[Any, Any, Any]) -> AsyncIterator[asyncio.Event]:
    """An event set once the request's client disconnects, while the block runs (it fits
    the application's ``ClientGone``)."""
    await request.body()  # read whole (cached: the route parsed its data from it)
    async with departure_of(request.receive) as gone:
        yield gone


@contextlib.asynccontextmanager
async def departure_of(receive: Receive) -> AsyncIterator[asyncio.Event]:
    """The same for a request whose body was already read whole from ``receive`` (the hot
    routes, adapters/http/hot_routes.py)."""
    gone = asyncio.Event()
    watcher = asyncio.ensure_future(_watch(receive, gone))
    try:
        yield gone
    finally:
        # Not awaited: the answer goes out first, and the task ends at the next turn.
        watcher.cancel()
