"""A small, fast HTTP/1.1 keep-alive client on asyncio protocols (uvloop when present).

The benchmark's load generator must not be the bottleneck, so this client does the
least work that HTTP/1.1 allows: requests are pre-encoded ``bytes`` (one
``transport.write`` each), a response is found by its blank line and its
``Content-Length`` and handed back as ``(status, body)``, and JSON is decoded with
msgspec only where the caller needs a value from it (a receipt handle). One
connection carries one request at a time (no pipelining); concurrency comes from
many connections, each driven by its own coroutine.

Chunked responses are not supported (Retsu always sends ``Content-Length``); a
response that arrives with neither a length nor a 1xx/204/304 status is an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

import msgspec

__all__ = [
    "Connection",
    "HttpError",
    "LatencyRecorder",
    "Requests",
    "connect",
    "percentile",
]


class HttpError(Exception):
    """A malformed response or a connection that went away mid-request."""


_HEADER_END = b"\r\n\r\n"
_CONTENT_LENGTH = b"\r\ncontent-length:"
_CHUNKED = b"transfer-encoding: chunked"


class _Protocol(asyncio.Protocol):
    """Parses responses to requests sent one at a time on this connection."""

    __slots__ = (
        "_body_start",
        "_buffer",
        "_closed",
        "_expected",
        "_status",
        "_waiter",
        "transport",
    )

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._expected = -1  # total bytes of the response being read, once known
        self._body_start = 0
        self._status = 0
        self._closed: BaseException | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = exc or HttpError("connection closed by the server")
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(HttpError(f"connection lost: {self._closed}"))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if self._expected < 0:
            end = buffer.find(_HEADER_END)
            if end < 0:
                return
            # "HTTP/1.1 200 OK": the status code is always at bytes 9..12.
            status = int(buffer[9:12])
            head = bytes(buffer[:end]).lower()
            at = head.find(_CONTENT_LENGTH)
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + len(_CONTENT_LENGTH) : stop if stop >= 0 else None])
            elif _CHUNKED in head:
                self._fail(HttpError("chunked responses are not supported"))
                return
            else:
                length = 0
            self._status = status
            self._body_start = end + 4
            self._expected = end + 4 + length
        if len(buffer) < self._expected:
            return
        total = self._expected
        body = bytes(buffer[self._body_start : total])
        del buffer[:total]
        self._expected = -1
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, body))

    def _fail(self, error: BaseException) -> None:
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        if self.transport is not None:
            self.transport.close()

    def send(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        if self._closed is not None or self.transport is None:
            raise HttpError(f"connection closed: {self._closed}")
        waiter: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self.transport.write(request)
        return waiter


class Connection:
    """One keep-alive connection; reconnects transparently when the server closed it."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._protocol: _Protocol | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Protocol, self.host, self.port)
        self._protocol = protocol

    async def request(self, data: bytes) -> tuple[int, bytes]:
        """Send one pre-encoded request and return (status, body)."""
        protocol = self._protocol
        if protocol is None or protocol._closed is not None:
            await self.open()
            protocol = self._protocol
            assert protocol is not None
        return await protocol.send(data)

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


async def connect(host: str, port: int) -> Connection:
    connection = Connection(host, port)
    await connection.open()
    return connection


def encode_request(method: str, path: str, host: str, body: bytes | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: {host}\r\n"
    if body is None:
        return (head + "content-length: 0\r\n\r\n").encode()
    return (
        head + f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


class DeliveredOut(msgspec.Struct):
    id: str
    receipt_handle: str


class MessagesOut(msgspec.Struct):
    messages: list[DeliveredOut]


class _Receipt(msgspec.Struct):
    id: str
    receipt_handle: str


class _BatchAck(msgspec.Struct):
    messages: list[_Receipt]


class _Message(msgspec.Struct):
    payload: str
    priority: str


class _Batch(msgspec.Struct):
    messages: list[_Message]


PRIORITIES = ("HIGH", "MEDIUM", "LOW")


class Requests:
    """Pre-encoded requests for one queue of a Retsu API at host:port."""

    def __init__(self, host: str, port: int, queue_id: str, payload: str, batch_size: int = 100):
        self.host_header = f"{host}:{port}"
        base = f"/v1/queues/{queue_id}/messages"
        self._base = base
        encoder = msgspec.json.Encoder()
        self.enqueue_one = [
            encode_request(
                "POST", base, self.host_header, encoder.encode(_Message(payload, priority))
            )
            for priority in PRIORITIES
        ]
        mixed = [_Message(payload, PRIORITIES[i % 3]) for i in range(batch_size)]
        self.enqueue_batch = encode_request(
            "POST", f"{base}/batch", self.host_header, encoder.encode(_Batch(mixed))
        )
        self.dequeue_one = encode_request("POST", f"{base}/dequeue", self.host_header)
        self.dequeue_batch = encode_request(
            "POST",
            f"{base}/dequeue",
            self.host_header,
            b'{"max_messages":%d}' % batch_size,
        )
        self._ack_head = f"POST {base}/".encode()
        self._ack_tail = (
            f"/acknowledge HTTP/1.1\r\nhost: {self.host_header}\r\n"
            "content-type: application/json\r\ncontent-length: "
        ).encode()
        self._batch_ack_head = (
            f"POST {base}/acknowledge HTTP/1.1\r\nhost: {self.host_header}\r\n"
            "content-type: application/json\r\ncontent-length: "
        ).encode()
        self._encoder = encoder
        self.one_decoder = msgspec.json.Decoder(DeliveredOut)
        self.many_decoder = msgspec.json.Decoder(MessagesOut)

    def ack_one(self, message_id: str, receipt_handle: str) -> bytes:
        body = b'{"receipt_handle":"%s"}' % receipt_handle.encode()
        return b"%s%s%s%d\r\n\r\n%s" % (
            self._ack_head,
            message_id.encode(),
            self._ack_tail,
            len(body),
            body,
        )

    def ack_many(self, delivered: Sequence[DeliveredOut]) -> bytes:
        body = self._encoder.encode(
            _BatchAck([_Receipt(d.id, d.receipt_handle) for d in delivered])
        )
        return b"%s%d\r\n\r\n%s" % (self._batch_ack_head, len(body), body)


@dataclass
class LatencyRecorder:
    """Per-operation latency samples in seconds (every sample kept; sorted on demand)."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error_examples: dict[str, str] = field(default_factory=dict)

    def series(self, operation: str) -> list[float]:
        found = self.samples.get(operation)
        if found is None:
            found = self.samples[operation] = []
        return found

    def error(self, operation: str, detail: str) -> None:
        self.errors[operation] = self.errors.get(operation, 0) + 1
        self.error_examples.setdefault(operation, detail[:300])

    def merge(self, other: LatencyRecorder) -> None:
        for operation, values in other.samples.items():
            self.series(operation).extend(values)
        for operation, count in other.errors.items():
            self.errors[operation] = self.errors.get(operation, 0) + count
        for operation, detail in other.error_examples.items():
            self.error_examples.setdefault(operation, detail)

    def summary(self, operation: str) -> tuple[float, float, float] | None:
        """(p50, p95, p99) in milliseconds, or None without samples."""
        values = self.samples.get(operation)
        if not values:
            return None
        ordered = sorted(values)
        return (
            percentile(ordered, 50) * 1000,
            percentile(ordered, 95) * 1000,
            percentile(ordered, 99) * 1000,
        )


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def wait_until_ready(host: str, port: int, path: str, within: float) -> None:
    """Poll GET path until it answers 200."""
    deadline = time.monotonic() + within
    request = encode_request("GET", path, f"{host}:{port}")
    last: object = None
    while time.monotonic() < deadline:
        connection = Connection(host, port)
        try:
            await connection.open()
            status, body = await asyncio.wait_for(connection.request(request), 2)
            if status == 200:
                return
            last = (status, body[:200])
        except (OSError, HttpError, TimeoutError) as error:
            last = error
        finally:
            connection.close()
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{host}:{port}{path} not ready after {within} s (last: {last!r})")


def chunks(items: Sequence[object], size: int) -> Iterable[Sequence[object]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
