"""`python -m bench.http_protocol`: the server CPU each HTTP protocol class costs per request.

The real API app (``ApiContainer``; ``GET /health/live`` touches no storage) served by
uvicorn on uvloop in a process of its own, with each protocol class given as
``module:Class``, under a keep-alive load of raw-socket clients in this process. Prints, per
variant and round (variants interleaved), the server process's CPU time per request (far
less disturbed by a shared machine than wall time) and requests per second.

    python -m bench.http_protocol \\
        --protocol uvicorn.protocols.http.httptools_impl:HttpToolsProtocol \\
        --protocol retsu.entrypoints.serving:BoundedProtocol

``module:Class@/other/checkout/src`` serves with that checkout's code first on the path, to
compare with a class that is no longer in this one (docs/performance.md, "HTTP server").

``--in-process``: no sockets and no Retsu app, only the protocol: each request is handed to
``data_received`` of a protocol on a stub transport, a one-line ASGI app answers it, and
the CPU time per request is the best of five runs — the protocol's own cost, with far less
noise than the socket load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REQUEST = b"GET /health/live HTTP/1.1\r\nhost: bench\r\nuser-agent: bench\r\naccept: */*\r\n\r\n"
_TICKS = os.sysconf("SC_CLK_TCK")


def _serve(protocol: str, port: int) -> None:
    import uvicorn
    from uvicorn.importer import import_from_string

    from retsu.entrypoints.containers import ApiContainer
    from retsu.entrypoints.settings import build_settings

    settings = build_settings(
        {
            "database": {"url": "postgresql://bench@127.0.0.1:1/none"},
            "cache": {"distributed": {"enabled": False}},
        }
    )
    config = uvicorn.Config(
        ApiContainer(settings=settings).app(on_startup=[], on_shutdown=[]),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http=import_from_string(protocol),
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
    )
    uvicorn.Server(config).run()


async def _tiny_app(scope: Any, receive: Any, send: Any) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


class _StubTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: Any) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 80), "peername": ("127.0.0.1", 1)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _in_process(protocol: str, requests: int) -> float:
    """Best CPU µs per request of five runs of ``protocol`` on a stub transport."""
    import uvicorn
    from uvicorn.importer import import_from_string
    from uvicorn.server import ServerState

    kind = import_from_string(protocol)
    config = uvicorn.Config(
        _tiny_app, http=kind, ws="none", lifespan="off", log_config=None, access_log=False
    )
    config.load()
    best = float("inf")
    for _ in range(5):
        instance = kind(
            config=config,
            server_state=ServerState(),
            app_state={},
            _loop=asyncio.get_running_loop(),
        )
        transport = _StubTransport()
        instance.connection_made(transport)
        started = time.process_time()
        for sent in range(1, requests + 1):
            instance.data_received(REQUEST)
            # Run the response task until it wrote its head and body: a bare yield to the
            # loop, as cheap as waiting gets (an Event would add its own cost to the figure).
            while transport.writes < 2 * sent:  # noqa: ASYNC110
                await asyncio.sleep(0)
        best = min(best, (time.process_time() - started) / requests * 1e6)
        instance.connection_lost(None)
    return best


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


async def _client(port: int, count: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = await _exchange(reader, writer)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    for _ in range(count - 1):
        await _exchange(reader, writer)
        await reader.readexactly(length)
    writer.close()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(REQUEST)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(head.decode(errors="replace"))
    return head


async def _load(port: int, connections: int, requests: int) -> float:
    started = time.monotonic()
    await asyncio.gather(*(_client(port, requests // connections) for _ in range(connections)))
    return time.monotonic() - started


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(source: str) -> dict[str, str]:
    env = dict(os.environ)
    if source:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    return env


def _measure_in_process(protocol: str, requests: int) -> float:
    """In a process of its own, so that ``@src`` applies."""
    protocol, _, source = protocol.partition("@")
    command = [sys.executable, "-m", "bench.http_protocol", "--in-process", "--serve", protocol]
    command += ["--requests", str(requests)]
    output = subprocess.run(command, env=_env(source), capture_output=True, text=True, check=True)
    return float(output.stdout.strip())


def _measure(protocol: str, connections: int, requests: int) -> tuple[float, float]:
    port = _free_port()
    protocol, _, source = protocol.partition("@")
    env = _env(source)
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.http_protocol", "--serve", protocol, "--port", str(port)],
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"{protocol}: the server did not start") from None
                time.sleep(0.1)
        import uvloop

        uvloop.run(_load(port, connections, requests // 10))  # warm-up
        before = _cpu_seconds(server.pid)
        elapsed = uvloop.run(_load(port, connections, requests))
        cpu = _cpu_seconds(server.pid) - before
        return cpu / requests * 1e6, requests / elapsed
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--protocol", action="append", help="module:Class[@src directory] (repeatable)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--requests", type=int, default=20_000, help="per round")
    parser.add_argument("--in-process", action="store_true", help="the protocol alone")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        if args.in_process:
            import uvloop

            print(f"{uvloop.run(_in_process(args.serve, args.requests)):.1f}")
        else:
            _serve(args.serve, args.port)
        return
    protocols = args.protocol or [
        "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol",
        "retsu.entrypoints.serving:BoundedProtocol",
    ]
    for round_ in range(1, args.rounds + 1):
        # Interleaved, in the reverse order every other round.
        for protocol in protocols if round_ % 2 else reversed(protocols):
            if args.in_process:
                cpu = _measure_in_process(protocol, args.requests)
                print(f"round {round_}  {protocol}: {cpu:.1f} µs CPU per request (in process)")
            else:
                cpu, rate = _measure(protocol, args.connections, args.requests)
                print(
                    f"round {round_}  {protocol}: {cpu:.0f} µs CPU per request, {rate:,.0f} req/s"
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
