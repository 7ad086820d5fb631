"""Serving an ASGI app with uvicorn while Retsu owns the process signals, with bounded
requests (SPEC §3.1).

uvicorn normally captures SIGTERM/SIGINT itself and re-raises them after it stops, which
would kill the process with the signal instead of exiting 0. Retsu installs its own handlers
instead, so a role can first stop taking new work (and answer waiting long polls), then stop
the server, then exit 0.

uvicorn's httptools protocol bounds neither the size nor the count of request headers, nor
the time a client takes to send them or the body, and never times out a connection that
sends nothing. ``BoundedProtocol`` adds those bounds in front of it, by composition (no
private part of uvicorn is overridden or read); it keeps httptools because uvicorn's h11
protocol, which bounds header size only, costs ~1.9x the CPU per request (measured:
docs/performance.md, "Serving").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import signal
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, ClassVar

import httptools
import msgspec
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from retsu.entrypoints.database import StartupError

logger = logging.getLogger("retsu.serving")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def bind(host: str, port: int, *, shared: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket on ``host:port``, or a one-line StartupError when the port is taken.

    ``shared``: join the port's SO_REUSEPORT group, so that each API process of
    ``http.workers`` listens on its own socket and the kernel spreads new connections over
    them. IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say so, and
    without it small responses wait ~40 ms for Nagle and delayed ACKs.
    """
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        # SO_REUSEADDR: a restart is not refused for connections still in TIME_WAIT; a
        # socket listening on the port still is.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
    except OSError as error:
        sock.close()
        reason = (
            "the port is already in use"
            if error.errno == errno.EADDRINUSE
            else (error.strerror or str(error)).lower()
        )
        raise StartupError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def ensure_port_free(host: str, port: int) -> None:
    """Refuse a port that another process listens on, SO_REUSEPORT or not: joining its
    group would let the kernel split the traffic between two unrelated servers."""
    bind(host, port).close()


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None] | None = None):
        super().__init__(config)
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.on_started is not None:
            self.on_started()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # signals are handled by on_stop_signal()

    def stop(self) -> None:
        self.should_exit = True


def on_stop_signal(callback: Callable[[], None]) -> None:
    """Call ``callback`` (once per signal) on SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, callback)


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one request may cost the server before the application sees it."""

    max_header_bytes: int = 32 * 1024  # request line and headers together
    max_headers: int = 100
    header_timeout_seconds: float = 10  # from a request's first byte to its last header
    body_timeout_seconds: float = 30  # from the last header to the end of the body
    keep_alive_timeout_seconds: float = 5  # a connection with no request in progress


class _Refused(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


_IDLE, _HEADERS, _BODY = 0, 1, 2  # where a connection is in its current request


class CoalescingTransport(asyncio.Transport):
    """A connection's transport whose writes of one event-loop turn go out as one.

    uvicorn writes a response's status line and headers, then its body, with two
    ``write`` calls; on uvloop each is a ``send`` at once, and with ``TCP_NODELAY`` two
    segments that wake the client twice. Here the writes of one turn are joined and sent
    by a callback the loop runs right after it (one ``call_soon``): one system call and one
    segment for a small response. ``close`` sends what is pending first; ``abort`` drops
    it, as the transport's own would. (Measured: docs/performance.md, "The enqueue and the
    HTTP edge".)
    """

    __slots__ = ("_loop", "_pending", "_pending_bytes", "_transport")

    # Past this many bytes pending, a write goes out at once: a large or streamed
    # response reaches the transport (and its flow control, which pauses the writer when
    # the socket's buffer is full) as it is written, not at the end of the turn.
    FLUSH_AT = 64 * 1024

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None
        self._pending_bytes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pending = self._pending
        if pending is None:
            self._pending = pending = [bytes(data)]
            self._pending_bytes = len(data)
            self._loop.call_soon(self._flush)
        else:
            pending.append(bytes(data))
            self._pending_bytes += len(data)
        if self._pending_bytes >= self.FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        pending = self._pending
        if pending is not None:
            self._pending = None
            self._pending_bytes = 0
            if not self._transport.is_closing():
                self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        return self._pending_bytes + self._transport.get_write_buffer_size()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._pending_bytes = 0
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


class BoundedProtocol(asyncio.Protocol):
    """uvicorn's httptools protocol behind request bounds, by composition. uvicorn takes
    this class as ``Config(http=<an asyncio.Protocol class>)``; it builds uvicorn's own
    protocol with the keyword arguments uvicorn passes, as they come, and drives it only
    through asyncio's Protocol methods: no private part of uvicorn is overridden or read.

    A parser of our own (httptools, as uvicorn's) reads every byte first. Header bytes are
    counted as they arrive (an unfinished header block too: the parser holds it in memory
    until its end), so at most the bound plus one read is buffered; over a bound, or past
    ``header_timeout_seconds`` without the end of the headers, the request is refused —
    ``431`` or ``408`` (problem+json, ``connection: close``) on a connection's first
    request, a plain close later (an earlier response may still be on its way, and ours
    must not be mistaken for it). A body slower than ``body_timeout_seconds`` gets the
    connection closed (the application sees a disconnect). A connection that opens and
    sends nothing is closed after the keep-alive timeout; between requests uvicorn's own
    keep-alive timeout applies. Timers are armed only when a request spans reads, so a
    request that arrives in one read (nearly all) costs no timer at all.
    """

    __slots__ = (
        "_chunk",
        "_count",
        "_deadline",
        "_parser",
        "_requests",
        "_size",
        "_state",
        "_unfinished",
        "inner",
        "loop",
        "transport",
    )
    limits: ClassVar[RequestLimits] = RequestLimits()
    inner_class: ClassVar[Callable[..., asyncio.Protocol]] = HttpToolsProtocol

    def __init__(self, **uvicorn_arguments: Any) -> None:
        self.inner = self.inner_class(**uvicorn_arguments)
        self.loop = uvicorn_arguments.get("_loop") or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        # As uvicorn sets its own, so that both parsers read a stream alike.
        with contextlib.suppress(AttributeError):
            self._parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._state = _IDLE
        self._requests = self._size = self._count = self._unfinished = self._chunk = 0
        self._deadline: asyncio.TimerHandle | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transport is not a subclass of asyncio's: typed as one all the same.
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[arg-type]
        self.inner.connection_made(self.transport)
        # uvicorn times a connection out only once it has answered a request.
        self._deadline = self.loop.call_later(
            self.limits.keep_alive_timeout_seconds, self._idle_timed_out
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        self._parser = None
        self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is not None:
            self._chunk = len(data)
            try:
                parser.feed_data(data)
            except httptools.HttpParserCallbackError as error:
                refused = error.__context__
                if not isinstance(refused, _Refused):
                    raise
                self._refuse(refused)
                return
            except httptools.HttpParserUpgrade:
                pass  # uvicorn's parser stops at the same byte, then both read on
            except httptools.HttpParserError:
                self._parser = None  # uvicorn's parser fails alike: 400, then it closes
            if self._state == _HEADERS:
                # httptools holds a header in memory until its end arrives: count the bytes
                # of an unfinished header block as they come (from the read after the one
                # that began the request, which may hold the end of the previous one).
                self._unfinished += len(data)
                if self._unfinished > self.limits.max_header_bytes:
                    self._refuse(_too_large(self.limits))
                    return
                if self._deadline is None:
                    self._set_deadline(self.limits.header_timeout_seconds, self._headers_late)
            elif self._state == _BODY and self._deadline is None:
                self._set_deadline(self.limits.body_timeout_seconds, self._body_late)
        self.inner.data_received(data)

    # Our parser's callbacks (called from feed_data)

    def on_message_begin(self) -> None:
        self._cancel_deadline()  # the first request: no longer idle
        self._state = _HEADERS
        self._requests += 1
        self._size = self._count = 0
        self._unfinished = -self._chunk

    def on_url(self, url: bytes) -> None:
        self._add(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count += 1
        if self._count > self.limits.max_headers:
            raise _Refused(
                431,
                "too_many_headers",
                f"A request may carry at most {self.limits.max_headers} headers.",
            )
        self._add(len(name) + len(value) + 4)

    def on_headers_complete(self) -> None:
        self._cancel_deadline()
        self._state = _BODY

    def on_message_complete(self) -> None:
        self._cancel_deadline()
        self._state = _IDLE

    # Bounds

    def _add(self, size: int) -> None:
        self._size += size
        if self._size > self.limits.max_header_bytes:
            raise _too_large(self.limits)

    def _set_deadline(self, seconds: float, callback: Callable[[], None]) -> None:
        self._deadline = self.loop.call_later(seconds, callback)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _idle_timed_out(self) -> None:
        self._deadline = None
        if self.transport is not None:
            self.transport.close()

    def _headers_late(self) -> None:
        self._deadline = None
        self._refuse(
            _Refused(408, "request_timeout", "The request headers did not arrive in time.")
        )

    def _body_late(self) -> None:
        self._deadline = None
        logger.debug("closing a connection whose request body did not arrive in time")
        if self.transport is not None:
            self.transport.close()

    def _refuse(self, refused: _Refused) -> None:
        """Answer a problem document the application never saw (on a connection's first
        request only, see the class docstring), and close."""
        self._cancel_deadline()
        self._parser = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._requests <= 1:
            transport.write(_problem_response(refused))
        transport.close()


def _problem_response(refused: _Refused) -> bytes:
    body = msgspec.json.encode(
        {
            "type": "about:blank",
            "title": HTTPStatus(refused.status).phrase,
            "status": refused.status,
            "detail": refused.detail,
            "code": refused.code,
        }
    )
    head = (
        f"HTTP/1.1 {refused.status} {HTTPStatus(refused.status).phrase}\r\n"
        f"date: {formatdate(usegmt=True)}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        f"x-request-id: {os.urandom(16).hex()}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _too_large(limits: RequestLimits) -> _Refused:
    return _Refused(
        431,
        "request_headers_too_large",
        f"The request line and headers may take at most {limits.max_header_bytes} bytes.",
    )


def config(
    app: object,
    *,
    host: str,
    port: int,
    shutdown_timeout_seconds: float,
    limits: RequestLimits | None = None,
) -> uvicorn.Config:
    limits = limits or RequestLimits()
    protocol = type("BoundedProtocol", (BoundedProtocol,), {"__slots__": (), "limits": limits})
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        loop="uvloop",
        http=protocol,
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout_seconds)),
        timeout_graceful_shutdown=max(1, round(shutdown_timeout_seconds)),
    )
