"""serving.BoundedProtocol on its own: in front of a stand-in that offers nothing but
asyncio.Protocol's methods (so the bounds cannot lean on any part of uvicorn's protocol),
driven with bytes as a socket would deliver them. The real server behind real sockets:
tests/integration/test_request_limits.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

import pytest

from retsu.entrypoints import serving

LIMITS = serving.RequestLimits(
    max_header_bytes=1024,
    max_headers=10,
    header_timeout_seconds=0.2,
    body_timeout_seconds=0.2,
    keep_alive_timeout_seconds=0.2,
)
GET = b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n"


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Connection:
    """A BoundedProtocol before a stand-in limited to asyncio.Protocol's interface."""

    def __init__(self) -> None:
        self.inner = mock.create_autospec(asyncio.Protocol, instance=True)
        kind = type(
            "Bounded",
            (serving.BoundedProtocol,),
            {"__slots__": (), "limits": LIMITS, "inner_class": self._inner},
        )
        self.arguments: dict[str, Any] = {}
        self.protocol = kind(config="c", server_state="s", app_state={}, _loop=None)
        self.transport = Transport()
        self.protocol.connection_made(self.transport)

    def _inner(self, **arguments: Any) -> Any:
        self.arguments = arguments
        return self.inner

    def send(self, *reads: bytes) -> None:
        for data in reads:
            self.protocol.data_received(data)

    @property
    def forwarded(self) -> bytes:
        return b"".join(call.args[0] for call in self.inner.data_received.call_args_list)

    def problem(self) -> tuple[int, dict[str, Any]]:
        head, _, body = self.transport.written.partition(b"\r\n\r\n")
        assert b"content-type: application/problem+json" in head
        assert b"connection: close" in head
        return int(head.split(b" ", 2)[1]), json.loads(body)


async def test_uvicorns_protocol_is_built_as_uvicorn_asks_and_driven_as_a_protocol() -> None:
    connection = Connection()
    assert connection.arguments == {
        "config": "c",
        "server_state": "s",
        "app_state": {},
        "_loop": None,
    }
    # uvicorn's protocol writes through the coalescing wrapper of the connection's transport.
    ((given,), _) = connection.inner.connection_made.call_args
    assert isinstance(given, serving.CoalescingTransport)
    assert given is connection.protocol.transport
    connection.send(GET, GET[:10], GET[10:])
    assert connection.forwarded == GET * 2
    connection.protocol.pause_writing()
    connection.protocol.resume_writing()
    connection.protocol.eof_received()
    connection.protocol.connection_lost(None)
    connection.inner.pause_writing.assert_called_once_with()
    connection.inner.resume_writing.assert_called_once_with()
    connection.inner.eof_received.assert_called_once_with()
    connection.inner.connection_lost.assert_called_once_with(None)
    assert connection.transport.written == b""


async def test_a_request_in_one_read_arms_no_timer() -> None:
    connection = Connection()
    assert connection.protocol._deadline is not None  # the never-sent-anything timeout
    connection.send(GET)
    assert connection.protocol._deadline is None
    connection.send(b"POST /v1/queues HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
    assert connection.protocol._deadline is None


@pytest.mark.parametrize(
    ("reads", "code"),
    [
        ([b"GET / HTTP/1.1\r\nx-big: " + b"a" * 2000 + b"\r\n\r\n"], "request_headers_too_large"),
        ([b"GET / HTTP/1.1\r\nx-big: ", b"a" * 600, b"a" * 600], "request_headers_too_large"),
        ([b"GET /" + b"u" * 2000 + b" HTTP/1.1\r\n\r\n"], "request_headers_too_large"),
        ([b"GET / HTTP/1.1\r\n" + b"x: 1\r\n" * 11 + b"\r\n"], "too_many_headers"),
    ],
)
async def test_a_first_request_over_a_bound_gets_431_and_never_reaches_uvicorn(
    reads: list[bytes], code: str
) -> None:
    connection = Connection()
    connection.send(*reads)
    assert connection.problem() == (431, mock.ANY)
    assert connection.problem()[1]["code"] == code
    assert connection.transport.closed
    # What was forwarded before the refusal is an unfinished header block at most.
    assert b"\r\n\r\n" not in connection.forwarded


async def test_a_later_request_over_a_bound_gets_a_close_only() -> None:
    connection = Connection()
    connection.send(GET + b"GET / HTTP/1.1\r\n" + b"x: 1\r\n" * 11 + b"\r\n")
    assert connection.transport.closed
    assert connection.transport.written == b""


async def test_slow_headers_get_408_and_a_slow_body_a_close() -> None:
    connection = Connection()
    connection.send(b"GET / HTTP/1.1\r\nhost: x\r\n")
    await asyncio.sleep(0.3)
    status, problem = connection.problem()
    assert (status, problem["code"]) == (408, "request_timeout")

    connection = Connection()
    connection.send(b"POST / HTTP/1.1\r\ncontent-length: 10\r\n\r\n{")
    await asyncio.sleep(0.1)
    connection.send(b" ")  # trickling does not extend the deadline
    await asyncio.sleep(0.2)
    assert connection.transport.closed and connection.transport.written == b""


async def test_an_idle_connection_is_closed_until_its_first_request() -> None:
    connection = Connection()
    await asyncio.sleep(0.3)
    assert connection.transport.closed

    connection = Connection()
    connection.send(GET)
    await asyncio.sleep(0.3)  # from here on, uvicorn's own keep-alive timeout
    assert not connection.transport.closed


async def test_bytes_the_parser_refuses_go_to_uvicorn_which_answers_them() -> None:
    connection = Connection()
    connection.send(b"GET / HTTP/1.1\r\nhost x\r\n\r\n", b"more")
    assert connection.forwarded == b"GET / HTTP/1.1\r\nhost x\r\n\r\nmore"
    assert connection.transport.written == b"" and not connection.transport.closed


class CountingTransport(Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        super().write(data)

    def abort(self) -> None:
        self.aborted = True
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0


async def test_the_writes_of_one_turn_go_out_as_one() -> None:
    inner = CountingTransport()
    transport = serving.CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.write(b"")
    transport.writelines([b"a", bytearray(b"b")])
    assert inner.writes == []  # nothing sent within the turn
    assert transport.get_write_buffer_size() == 29
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 204 No Content\r\n\r\nab"]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert inner.writes[1:] == [b"next"]  # a later turn: a write of its own


async def test_a_large_response_goes_out_as_it_is_written() -> None:
    """Past FLUSH_AT pending bytes the write is sent at once: the transport's own flow
    control (pause_writing on a full socket buffer) sees a large or streamed body as it
    grows, not at the end of the turn."""
    inner = CountingTransport()
    transport = serving.CoalescingTransport(inner, asyncio.get_running_loop())
    chunk = b"x" * (serving.CoalescingTransport.FLUSH_AT // 4)
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    for _ in range(4):
        transport.write(chunk)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\n" + chunk * 4]
    assert transport.get_write_buffer_size() == 0
    transport.write(b"tail")
    assert transport.get_write_buffer_size() == 4
    await asyncio.sleep(0)
    assert inner.writes[1:] == [b"tail"]


async def test_close_sends_what_is_pending_first_and_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    inner = CountingTransport()
    transport = serving.CoalescingTransport(inner, loop)
    transport.write(b"last answer")
    transport.close()
    assert inner.writes == [b"last answer"] and inner.closed
    await asyncio.sleep(0)  # the scheduled flush finds nothing more to send
    assert inner.writes == [b"last answer"]
    dropped = CountingTransport()
    transport = serving.CoalescingTransport(dropped, loop)
    transport.write(b"never")
    transport.abort()
    await asyncio.sleep(0)
    assert dropped.writes == [] and dropped.aborted


async def test_nothing_is_written_to_a_transport_already_closing() -> None:
    inner = CountingTransport()
    transport = serving.CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"too late")
    inner.closed = True  # the peer went away in between
    await asyncio.sleep(0)
    assert inner.writes == []
