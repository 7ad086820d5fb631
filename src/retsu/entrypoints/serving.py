"""Serving an ASGI app with uvicorn while Retsu owns the process signals, with bounded
requests (SPEC §3.1).

uvicorn normally captures SIGTERM/SIGINT itself and re-raises them after it stops, which
would kill the process with the signal instead of exiting 0. Retsu installs its own handlers
instead, so a role can first stop taking new work (and answer waiting long polls), then stop
the server, then exit 0.

uvicorn's httptools protocol bounds neither the size nor the count of request headers, nor
the time a client takes to send them or the body, and never times out a connection that
sends nothing. ``BoundedHttpToolsProtocol`` adds those bounds; it keeps httptools because
uvicorn's h11 protocol, which bounds header size only, costs ~1.9x the CPU per request
(measured: docs/performance.md, "HTTP server").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import signal
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass
from http import HTTPStatus
from typing import ClassVar

import httptools
import msgspec
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from retsu.entrypoints.database import StartupError

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


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header bounds and request timeouts.

    A request over a header bound gets ``431`` (problem+json, ``connection: close``) before
    the application sees it; bytes of an unfinished header block are counted as they
    arrive, so at most the bound plus one read is ever buffered. A client that takes longer
    than ``header_timeout_seconds`` to send its headers gets ``408``; one that takes longer
    than ``body_timeout_seconds`` to send its body is disconnected (the application sees
    the disconnect). A connection that opens and sends nothing is closed after the
    keep-alive timeout, like one idle between requests.
    """

    limits: ClassVar[RequestLimits] = RequestLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = self._header_count = self._unfinished_bytes = self._chunk = 0
        self._reading_headers = False
        self._deadline: asyncio.TimerHandle | None = None
        # uvicorn arms its keep-alive timer only after a first response.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        self._chunk = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            refused = error.__context__
            if not isinstance(refused, _Refused):
                raise
            self._refuse(refused)
            return
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()
            return
        if self._reading_headers:
            # httptools holds a header in memory until its end arrives: count the bytes of
            # an unfinished header block as they come (from the read after the one that
            # began the request, which may hold the end of the previous one).
            self._unfinished_bytes += len(data)
            if self._unfinished_bytes > self.limits.max_header_bytes:
                self._refuse(_too_large(self.limits))

    # Parser callbacks (called from feed_data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers = True
        self._header_bytes = self._header_count = 0
        self._unfinished_bytes = -self._chunk
        self._set_deadline(self.limits.header_timeout_seconds, self._headers_timed_out)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Refused(
                431,
                "too_many_headers",
                f"A request may carry at most {self.limits.max_headers} headers.",
            )
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        self._set_deadline(self.limits.body_timeout_seconds, self._body_timed_out)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._cancel_deadline()
        super().on_message_complete()

    # Bounds

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.limits.max_header_bytes:
            raise _too_large(self.limits)

    def _set_deadline(self, seconds: float, callback: Callable[[], None]) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(seconds, callback)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_timed_out(self) -> None:
        self._deadline = None
        if self.cycle is None or self.cycle.response_complete:
            detail = "The request headers did not arrive in time."
            self._refuse(_Refused(408, "request_timeout", detail))
        else:  # a pipelined request behind a response still being written
            self.transport.close()

    def _body_timed_out(self) -> None:
        self._deadline = None
        self.logger.debug("closing a connection whose request body did not arrive in time")
        self.transport.close()

    def _refuse(self, refused: _Refused) -> None:
        """Answer a problem document the application never saw, and close."""
        self._cancel_deadline()
        if self.transport.is_closing():
            return
        body = msgspec.json.encode(
            {
                "type": "about:blank",
                "title": HTTPStatus(refused.status).phrase,
                "status": refused.status,
                "detail": refused.detail,
                "code": refused.code,
            }
        )
        head = [STATUS_LINE[refused.status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.append(
            b"content-type: application/problem+json\r\n"
            b"content-length: %d\r\n"
            b"x-request-id: %s\r\n"
            b"connection: close\r\n\r\n" % (len(body), os.urandom(16).hex().encode())
        )
        self.transport.write(b"".join(head) + body)
        self.transport.close()


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
    protocol = type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"limits": limits})
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
