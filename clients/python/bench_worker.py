"""How fast one Worker drains a queue with a no-op handler, beside the raw batch calls.

    python clients/python/bench_worker.py --url http://127.0.0.1:2424 [--token T]
    python clients/python/bench_worker.py --start-server      # a throwaway `retsu api`

For each prefetch (1 and 100) it prefills a fresh queue, then times
  * runner: ``Worker(concurrency=1, prefetch=P)`` with ``async def handler(m): pass``,
    from start until every message is acknowledged;
  * raw:    the same client in a plain loop, ``dequeue_many(P)`` then
    ``acknowledge_batch(...)``, until the queue is empty;
and prints messages/s, the runner's overhead over the raw loop, and the client process's
own CPU time per 1,000 messages (steadier than wall time on a shared machine: it is the
work the runner adds, whatever the server is doing). Runs alternate (raw, runner, raw,
runner, ...) so a noisy machine hurts both alike; the best of ``--rounds`` is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from retsu_client import AsyncClient, Client, Message, Worker


async def _noop(message: Message) -> None:
    return None


def _prefill(url: str, token: str | None, count: int) -> str:
    with Client(url, token=token) as retsu:
        queue = retsu.create_queue(f"bench-worker-{uuid.uuid4().hex[:8]}").name
        for start in range(0, count, 100):
            retsu.enqueue_batch(queue, ["x"] * min(100, count - start))
    return queue


def _drop(url: str, token: str | None, queue: str) -> None:
    with Client(url, token=token) as retsu:
        retsu.delete_queue(queue)


async def runner(url: str, token: str | None, queue: str, count: int, prefetch: int) -> float:
    handled = 0
    done = asyncio.Event()

    async def handler(message: Message) -> None:
        nonlocal handled
        handled += 1
        if handled == count:
            done.set()

    async with AsyncClient(url, token=token) as client:
        worker = Worker(client, queue, handler, prefetch=prefetch, wait_seconds=1)
        started = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await done.wait()
        worker.stop()  # flushes the last acknowledgements before run() returns
        await task
        return time.perf_counter() - started


async def raw(url: str, token: str | None, queue: str, count: int, batch: int) -> float:
    async with AsyncClient(url, token=token) as client:
        queue_id = await client.queue_id(queue)
        started = time.perf_counter()
        left = count
        while left:
            messages = await client.dequeue_many(queue_id, min(batch, 100))
            if not messages:
                raise RuntimeError("queue drained early")
            await client.acknowledge_batch(queue_id, messages)
            left -= len(messages)
        return time.perf_counter() - started


def measure(url: str, token: str | None, counts: dict[int, int], rounds: int) -> None:
    print(
        f"{'prefetch':>8}  {'messages':>8}  {'raw msg/s':>10}  {'runner msg/s':>12}  "
        f"{'overhead':>8}  {'raw CPU ms/1k':>13}  {'runner CPU ms/1k':>16}"
    )
    for prefetch, count in counts.items():
        best = {"raw": 0.0, "runner": 0.0}
        cpu = {"raw": float("inf"), "runner": float("inf")}
        for _ in range(rounds):
            for kind in ("raw", "runner"):
                queue = _prefill(url, token, count)
                try:
                    run = raw if kind == "raw" else runner
                    before = time.process_time()
                    seconds = asyncio.run(run(url, token, queue, count, prefetch))
                    used = time.process_time() - before
                finally:
                    _drop(url, token, queue)
                best[kind] = max(best[kind], count / seconds)
                cpu[kind] = min(cpu[kind], used / count * 1e6)
        overhead = 1 - best["runner"] / best["raw"]
        print(
            f"{prefetch:>8}  {count:>8}  {best['raw']:>10.0f}  {best['runner']:>12.0f}  "
            f"{overhead:>8.1%}  {cpu['raw']:>13.0f}  {cpu['runner']:>16.0f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:2424")
    parser.add_argument("--token")
    parser.add_argument("--start-server", action="store_true", help="start a throwaway server")
    parser.add_argument("--single", type=int, default=600, help="messages for prefetch 1")
    parser.add_argument("--batched", type=int, default=5000, help="messages for prefetch 100")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = {1: args.single, 100: args.batched}
    if not args.start_server:
        measure(args.url, args.token, counts, args.rounds)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
    from client_support import ADMIN, start_real_server

    server = start_real_server(Path(tempfile.mkdtemp(prefix="retsu-bench-")))
    if isinstance(server, str):
        print(f"cannot start a server: {server}", file=sys.stderr)
        return 1
    try:
        measure(server.url, ADMIN, counts, args.rounds)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
