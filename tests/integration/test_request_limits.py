"""Bounded requests against a real `retsu api` over raw sockets (SPEC §3.1): header size and
count, the time to send headers and body, and idle connections."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import RetsuProcess, free_port, retsu_env

pytestmark = pytest.mark.integration

HEADER_TIMEOUT = 2
BODY_TIMEOUT = 2
KEEP_ALIVE = 1
TOKEN = "limits-test-secret"


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RetsuProcess]:
    port = free_port()
    env = {
        **retsu_env(database_url),
        "RETSU_HTTP__PORT": str(port),
        "RETSU_HTTP__HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "RETSU_HTTP__BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "RETSU_HTTP__KEEP_ALIVE_TIMEOUT_SECONDS": str(KEEP_ALIVE),
        "RETSU_AUTH__ENABLED": "true",
        "RETSU_AUTH__TOKENS": json.dumps([{"name": "t", "secret": TOKEN, "scopes": ["admin"]}]),
    }
    process = RetsuProcess(["api"], env, Path(tmp_path_factory.mktemp("limits")) / "api.log")
    process.port = port  # type: ignore[attr-defined]
    try:
        process.wait_until_ready(f"http://127.0.0.1:{port}/health/ready")
        yield process
    finally:
        assert process.stop() == 0, process.output()


def connect(api: RetsuProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", api.port), timeout=10)  # type: ignore[attr-defined]
    return sock


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed."""
    started = time.monotonic()
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open {timeout} s") from None
    return received, time.monotonic() - started


def status_and_problem(response: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/problem+json" in head.lower()
    assert b"x-request-id: " in head.lower()
    return status, json.loads(body)


def rss_bytes(api: RetsuProcess) -> int:
    for line in Path(f"/proc/{api.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_all(sock: socket.socket, data: bytes) -> None:
    # The server may refuse and close before the client has sent everything.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)


def test_a_request_within_the_bounds_is_served(api: RetsuProcess) -> None:
    with connect(api) as sock:
        headers = "".join(f"x-extra-{i}: {'v' * 100}\r\n" for i in range(90))
        sock.sendall(f"GET /health/live HTTP/1.1\r\nhost: x\r\n{headers}\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_oversized_headers_get_431_before_auth(api: RetsuProcess) -> None:
    with connect(api) as sock:
        # No token: without the bound this would be a 401 from the auth layer.
        send_all(
            sock, b"GET /v1/queues HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n"
        )
        response, _ = read_until_closed(sock, 5)
    status, problem = status_and_problem(response)
    assert status == 431
    assert problem["code"] == "request_headers_too_large"
    assert problem["status"] == 431


def test_too_many_headers_get_431(api: RetsuProcess) -> None:
    with connect(api) as sock:
        headers = "".join(f"x-h{i}: 1\r\n" for i in range(101))
        send_all(sock, f"GET /health/live HTTP/1.1\r\nhost: x\r\n{headers}\r\n".encode())
        response, _ = read_until_closed(sock, 5)
    status, problem = status_and_problem(response)
    assert status == 431
    assert problem["code"] == "too_many_headers"


def test_huge_headers_are_refused_without_buffering_them_or_blocking(api: RetsuProcess) -> None:
    before = rss_bytes(api)
    chunk = b"a" * (1 << 20)
    refused: list[bytes] = []

    def attacker() -> None:
        with connect(api) as sock:
            send_all(sock, b"GET /health/live HTTP/1.1\r\nhost: x\r\nx-big: ")
            for _ in range(50):  # 50 MB, unless the server closes first
                try:
                    sock.sendall(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    break
            try:
                refused.append(read_until_closed(sock, 5)[0])
            except OSError:
                refused.append(b"")

    threads = [threading.Thread(target=attacker) for _ in range(8)]
    for thread in threads:
        thread.start()
    # The event loop keeps answering meanwhile.
    slowest = 0.0
    while any(thread.is_alive() for thread in threads):
        started = time.monotonic()
        assert httpx.get(f"http://127.0.0.1:{api.port}/health/live", timeout=5).status_code == 200  # type: ignore[attr-defined]
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert slowest < 1.0
    assert len(refused) == 8
    assert rss_bytes(api) - before < 50 * (1 << 20)


def test_a_client_too_slow_to_send_its_headers_gets_408(api: RetsuProcess) -> None:
    with connect(api) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\n")
        started = time.monotonic()
        # One header byte a while, never the blank line that ends the headers.
        sock.settimeout(0.3)
        response = b""
        while time.monotonic() - started < HEADER_TIMEOUT + 5:
            try:
                sock.sendall(b"x")
                if chunk := sock.recv(65536):
                    response += chunk
                else:
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        elapsed = time.monotonic() - started
    assert elapsed < HEADER_TIMEOUT + 2, "slowloris kept the connection open"
    status, problem = status_and_problem(response)
    assert status == 408
    assert problem["code"] == "request_timeout"


def test_a_client_too_slow_to_send_its_body_is_disconnected(api: RetsuProcess) -> None:
    with connect(api) as sock:
        sock.sendall(
            b"POST /v1/queues HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + TOKEN.encode() + b"\r\ncontent-length: 100\r\n\r\n{"
        )
        _, elapsed = read_until_closed(sock, BODY_TIMEOUT + 5)
    assert elapsed < BODY_TIMEOUT + 2


def test_a_connection_that_sends_nothing_is_closed(api: RetsuProcess) -> None:
    with connect(api) as sock:
        received, elapsed = read_until_closed(sock, KEEP_ALIVE + 5)
    assert received == b""
    assert elapsed < KEEP_ALIVE + 2


def test_an_idle_keep_alive_connection_is_closed(api: RetsuProcess) -> None:
    with connect(api) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        _, elapsed = read_until_closed(sock, KEEP_ALIVE + 5)
    assert elapsed < KEEP_ALIVE + 2


def test_a_long_poll_outlives_the_request_timeouts(api: RetsuProcess) -> None:
    base = f"http://127.0.0.1:{api.port}"  # type: ignore[attr-defined]
    auth = {"authorization": f"Bearer {TOKEN}"}
    queue = httpx.post(f"{base}/v1/queues", json={"name": "limits-long-poll"}, headers=auth)
    assert queue.status_code == 201, queue.text
    started = time.monotonic()
    response = httpx.post(
        f"{base}/v1/queues/{queue.json()['id']}/messages/dequeue",
        json={"wait_seconds": 4},
        headers=auth,
        timeout=10,
    )
    assert response.status_code == 204
    assert time.monotonic() - started >= 3.5


def responses(sock: socket.socket, count: int, timeout: float = 5) -> list[bytes]:
    """The status lines of the next ``count`` responses, each read whole (content-length)."""
    sock.settimeout(timeout)
    received = b""
    statuses: list[bytes] = []
    while len(statuses) < count:
        head, separator, rest = received.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: (\d+)", head)
        if separator and length and len(rest) >= int(length.group(1)):
            statuses.append(head.split(b"\r\n", 1)[0])
            received = rest[int(length.group(1)) :]
            continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    assert received == b"", received  # nothing beyond the responses asked for
    return statuses


def test_pipelined_requests_are_all_answered(api: RetsuProcess) -> None:
    request = b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n"
    with connect(api) as sock:
        sock.sendall(request * 3)
        assert responses(sock, 3) == [b"HTTP/1.1 200 OK"] * 3
        # Split at every byte, over several reads.
        for byte in request:
            sock.sendall(bytes([byte]))
            time.sleep(0.001)
        assert responses(sock, 1) == [b"HTTP/1.1 200 OK"]


def test_an_upgrade_it_does_not_offer_is_ignored(api: RetsuProcess) -> None:
    """curl --http2 on an http:// URL asks for h2c; the answer is plain HTTP/1.1, and the
    connection goes on with its bounds."""
    with connect(api) as sock:
        sock.sendall(
            b"GET /health/live HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\n"
            b"upgrade: h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
        )
        assert responses(sock, 1) == [b"HTTP/1.1 200 OK"]
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        assert responses(sock, 1) == [b"HTTP/1.1 200 OK"]
        send_all(sock, b"GET /health/live HTTP/1.1\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n")
        response, _ = read_until_closed(sock, 5)
    assert b"HTTP/1.1 200" not in response


def test_a_chunked_body_over_several_reads_is_read_whole(api: RetsuProcess) -> None:
    with connect(api) as sock:
        sock.sendall(
            b"POST /v1/queues HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + TOKEN.encode() + b"\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        body = b'{"name": "limits-chunked"}'
        for start in range(0, len(body), 5):
            piece = body[start : start + 5]
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(0.05)
        sock.sendall(b"0\r\n\r\n")
        assert responses(sock, 1) == [b"HTTP/1.1 201 Created"]


def test_a_later_request_over_the_bounds_gets_the_connection_closed(api: RetsuProcess) -> None:
    """Only a connection's first request is answered with a 431 or 408: on a later one, an
    earlier response may still be on its way, and a refusal must not pass for it."""
    with connect(api) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        assert responses(sock, 1) == [b"HTTP/1.1 200 OK"]
        send_all(sock, b"GET /health/live HTTP/1.1\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n")
        response, elapsed = read_until_closed(sock, 5)
    assert response == b""
    assert elapsed < 2
    with connect(api) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        assert responses(sock, 1) == [b"HTTP/1.1 200 OK"]
        sock.sendall(b"GET /health/live HTTP/1.1\r\nhost: x\r\n")  # never finished
        response, elapsed = read_until_closed(sock, HEADER_TIMEOUT + 5)
    assert response == b""
    assert elapsed < HEADER_TIMEOUT + 2


def test_a_malformed_request_gets_400(api: RetsuProcess) -> None:
    with connect(api) as sock:
        send_all(sock, b"GET /health/live HTTP/1.1\r\nhost x\r\n\r\n")
        response, _ = read_until_closed(sock, 5)
    assert response.startswith(b"HTTP/1.1 400 ")
