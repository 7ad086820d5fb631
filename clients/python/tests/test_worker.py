"""Worker (SPEC §9): against the fake (system clock) and a real server. Leases are short
(1-2 s; the API's smallest is 1 s), so lease handling is exercised in real time."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry

from client_support import Spy, Target, async_inner, unique
from retsu_client import AsyncClient, Message, QueueNotFound, RetryLater, Worker
from retsu_client import worker as worker_module
from retsu_client.metrics import WorkerMetrics
from retsu_client.worker import (
    ERROR_MAX_LENGTH,
    MAX_AHEAD,
    MAX_BATCH,
    RESULT_MAX_LENGTH,
    default_consumer_name,
    error_text,
    release_delay,
)


async def _until(check: Callable[[], bool], within: float = 15) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def _run(worker: Worker, until: Callable[[], bool], within: float = 15) -> None:
    """Run the worker until ``until()`` holds, then stop it and wait for it to finish."""
    task = asyncio.create_task(worker.run())
    try:
        await _until(lambda: until() or task.done(), within)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 20)


def _stats(target: Target, queue: str) -> tuple[int, int, int, int]:
    s = target.client().get_queue(queue).stats
    return s.ready, s.in_flight, s.delayed, s.dead_letters


def _spied(target: Target) -> tuple[AsyncClient, Spy]:
    spy = Spy(async_inner(target))
    return target.async_client(transport=spy), spy


class _Timed(Spy):
    """A Spy that also notes when each request was sent and when its answer came."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        super().__init__(inner)
        self.timed: list[tuple[str, float, float]] = []  # (path, sent, answered)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sent = time.monotonic()
        try:
            return await super().handle_async_request(request)
        finally:
            self.timed.append((request.url.path, sent, time.monotonic()))


def _asked(request: httpx.Request) -> int:
    return int(json.loads(request.content)["max_messages"])


async def test_an_async_handler_consumes_everything_with_batched_acks(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("worker")).name
    live_target.client().enqueue_batch(queue, [f"m{i}" for i in range(40)])
    seen: list[str] = []

    async def handler(message: Message) -> None:
        seen.append(message.payload)

    client, spy = _spied(live_target)
    async with client:
        worker = Worker(client, queue, handler, concurrency=4, prefetch=20, wait_seconds=1)
        await _run(worker, lambda: len(seen) == 40)

    assert sorted(seen) == sorted(f"m{i}" for i in range(40))
    assert _stats(live_target, queue) == (0, 0, 0, 0)
    dequeues = spy.paths("/messages/dequeue")
    acks = spy.paths("/messages/acknowledge")
    assert len(acks) < 40 / 2, "acknowledgements are coalesced into batch calls"
    assert len(dequeues) < 40 / 4, "messages are fetched in batches"
    assert all(r.headers["retsu-consumer"] == worker.consumer_name for r in dequeues)


async def test_plain_handlers_run_in_threads_up_to_the_concurrency(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("worker")).name
    live_target.client().enqueue_batch(queue, [str(i) for i in range(8)])
    lock = threading.Lock()
    running, most, done = 0, 0, []

    def handler(message: Message) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.3)
        with lock:
            running -= 1
            done.append(threading.current_thread().name)

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, concurrency=4, wait_seconds=1)
        started = time.monotonic()
        await _run(worker, lambda: len(done) == 8)
        elapsed = time.monotonic() - started

    assert most == 4
    assert elapsed < 8 * 0.3
    assert all(name.startswith("retsu-handler") for name in done)
    assert _stats(live_target, queue) == (0, 0, 0, 0)


async def test_failures_are_released_with_backoff_and_retry_later_picks_the_delay(
    live_target: Target,
) -> None:
    queue = live_target.client().create_queue(unique("worker")).name
    live_target.client().enqueue(queue, "flaky")
    attempts: list[tuple[int, float]] = []

    async def handler(message: Message) -> None:
        attempts.append((message.delivery_attempts, time.monotonic()))
        if message.delivery_attempts == 1:
            raise ValueError("boom")  # released for min(1 * 2**0, 60) = 1 s
        if message.delivery_attempts == 2:
            raise RetryLater(2)

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, retry_base=1, retry_cap=60, wait_seconds=1)
        await _run(worker, lambda: len(attempts) == 3 and _stats(live_target, queue)[1] == 0)

    assert [n for n, _ in attempts] == [1, 2, 3]
    first_gap = attempts[1][1] - attempts[0][1]
    second_gap = attempts[2][1] - attempts[1][1]
    assert first_gap >= 0.9  # released for 1 s
    assert second_gap >= 1.9  # RetryLater(2)
    assert _stats(live_target, queue) == (0, 0, 0, 0)


async def test_a_handler_running_three_leases_long_is_delivered_exactly_once(
    live_target: Target,
) -> None:
    # A 2 s lease (renewed each second) rather than the 1 s minimum: on a machine shared by
    # several test runs a renewal can take longer than the 0.5 s a 1 s lease leaves it.
    retsu = live_target.client()
    queue = retsu.create_queue(
        unique("lease"), visibility_timeout_seconds=2, max_delivery_attempts=1
    )
    retsu.enqueue(queue.name, "slow")
    calls: list[int] = []
    other_got: list[Message] = []

    async def handler(message: Message) -> None:
        calls.append(message.delivery_attempts)
        for _ in range(12):  # 6 s in all, while another consumer keeps trying
            await asyncio.sleep(0.5)
            async with live_target.async_client() as other:
                got = await other.dequeue(queue.name)
            if got is not None:
                other_got.append(got)
        finished.append(True)

    finished: list[bool] = []
    async with live_target.async_client() as client:
        worker = Worker(client, queue.name, handler, wait_seconds=1)
        # The stats call is synchronous and blocks the loop: make it only once the handler
        # is done, so it can never hold up a lease extension. 6 s of handler; the bound
        # leaves room for a host busy with other test runs.
        await _run(
            worker, lambda: bool(finished) and _stats(live_target, queue.name)[1] == 0, within=45
        )

    assert calls == [1]
    assert other_got == []
    assert _stats(live_target, queue.name) == (0, 0, 0, 0)


async def test_extension_stops_at_max_extension(live_target: Target) -> None:
    retsu = live_target.client()
    queue = retsu.create_queue(unique("lease"), visibility_timeout_seconds=1).name
    retsu.enqueue(queue, "too slow")
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(message: Message) -> None:
        started.set()
        await release.wait()

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, wait_seconds=1, max_extension=1)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(1.5)
        again = live_target.client().dequeue(queue)
        release.set()
        worker.stop()
        await asyncio.wait_for(task, 10)

    assert again is not None and again.delivery_attempts == 2


async def test_stopping_releases_unstarted_messages_and_finishes_running_ones(
    live_target: Target,
) -> None:
    queue = live_target.client().create_queue(unique("stop"), visibility_timeout_seconds=60).name
    live_target.client().enqueue_batch(queue, [f"m{i}" for i in range(5)])
    started, handled = asyncio.Event(), []

    async def handler(message: Message) -> None:
        started.set()
        await asyncio.sleep(0.5)
        handled.append(message.payload)

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, concurrency=1, prefetch=5, wait_seconds=1)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        worker.stop()
        await asyncio.wait_for(task, 10)

    assert handled == ["m0"]
    assert _stats(live_target, queue) == (4, 0, 0, 0), "the 4 prefetched are released at once"
    assert [m.payload for m in live_target.client().dequeue_many(queue, 10)] == [
        "m1",
        "m2",
        "m3",
        "m4",
    ]


async def test_a_handler_past_the_grace_period_is_released(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("stop"), visibility_timeout_seconds=60).name
    live_target.client().enqueue(queue, "stuck")
    started = threading.Event()

    def handler(message: Message) -> None:
        started.set()
        time.sleep(5)  # a blocking handler cannot be interrupted: it is abandoned

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, shutdown_grace=0.2, wait_seconds=1)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(asyncio.to_thread(started.wait, 10), 11)
        began = time.monotonic()
        worker.stop()
        await asyncio.wait_for(task, 10)
        stopped_in = time.monotonic() - began

    assert stopped_in < 3, "did not wait for the handler"
    assert _stats(live_target, queue) == (1, 0, 0, 0)


async def test_a_second_stop_cuts_the_grace_short(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("stop"), visibility_timeout_seconds=60).name
    live_target.client().enqueue(queue, "long")
    started = asyncio.Event()
    cancelled = []

    async def handler(message: Message) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(message.id)
            raise

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, shutdown_grace=30, wait_seconds=1)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        worker.stop()
        await asyncio.sleep(0.2)
        worker.stop()
        await asyncio.wait_for(task, 5)

    assert len(cancelled) == 1
    assert _stats(live_target, queue) == (1, 0, 0, 0)


async def test_metrics_count_outcomes_and_durations(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("metrics")).name
    live_target.client().enqueue_batch(queue, ["ok", "ok", "bad"])
    registry = CollectorRegistry()
    done: list[str] = []

    async def handler(message: Message) -> None:
        done.append(message.payload)
        if message.payload == "bad":
            raise RetryLater(600)

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, metrics=WorkerMetrics(registry), wait_seconds=1)
        await _run(
            worker,
            lambda: (
                len(done) == 3
                and registry.get_sample_value(
                    "retsu_worker_messages_total", {"queue": queue, "outcome": "acknowledged"}
                )
                == 2
            ),
        )

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"queue": queue, **labels})

    assert sample("retsu_worker_messages_received_total") == 3
    assert sample("retsu_worker_messages_total", outcome="retry_later") == 1
    assert sample("retsu_worker_handler_duration_seconds_count") == 3
    assert sample("retsu_worker_handlers_running") == 0


async def test_a_deleted_queue_stops_the_worker_with_its_error(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("gone")).name

    async def handler(message: Message) -> None:
        pass

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, wait_seconds=1)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        live_target.client().delete_queue(queue)
        with pytest.raises(QueueNotFound):
            await asyncio.wait_for(task, 10)


class _Broken(Spy):
    """Raises what no retry can fix (a bug, as far as the worker knows) on every dequeue."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/messages/dequeue"):
            raise RuntimeError("broken transport")
        return await super().handle_async_request(request)


async def test_an_unexpected_dequeue_error_stops_the_worker_with_it(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("broken")).name

    async def handler(message: Message) -> None:
        pass

    async with live_target.async_client(transport=_Broken(async_inner(live_target))) as client:
        with pytest.raises(RuntimeError, match="broken transport"):
            await asyncio.wait_for(Worker(client, queue, handler, wait_seconds=1).run(), 10)


async def test_an_unknown_queue_fails_at_start(live_target: Target) -> None:
    async def handler(message: Message) -> None:
        pass

    async with live_target.async_client() as client:
        with pytest.raises(QueueNotFound):
            await Worker(client, unique("never"), handler).run()


async def test_the_next_dequeue_is_sent_while_a_handler_runs(live_target: Target) -> None:
    queue = live_target.client().create_queue(unique("ahead")).name
    live_target.client().enqueue_batch(queue, ["a", "b", "c"])
    runs: list[tuple[float, float]] = []

    async def handler(message: Message) -> None:
        began = time.monotonic()
        await asyncio.sleep(0.5)
        runs.append((began, time.monotonic()))

    spy = _Timed(async_inner(live_target))
    async with live_target.async_client(transport=spy) as client:
        worker = Worker(client, queue, handler, concurrency=1, prefetch=2, wait_seconds=1)
        await _run(worker, lambda: len(runs) == 3)

    dequeues = [sent for path, sent, _ in spy.timed if path.endswith("/messages/dequeue")]
    # "a" and "b" come in one batch; when "a" is done, the refill is sent at once, while
    # "b" runs — not after it.
    assert any(began < sent < ended for sent in dequeues for began, ended in runs[1:])
    assert _stats(live_target, queue) == (0, 0, 0, 0)


async def test_by_default_fast_handlers_are_fed_in_batches_beyond_their_slots(
    live_target: Target,
) -> None:
    queue = live_target.client().create_queue(unique("adaptive")).name
    for start in range(0, 300, 100):
        live_target.client().enqueue_batch(queue, [f"m{i}" for i in range(start, start + 100)])
    seen: list[str] = []

    async def handler(message: Message) -> None:
        seen.append(message.payload)

    client, spy = _spied(live_target)
    async with client:
        worker = Worker(client, queue, handler, concurrency=2, wait_seconds=1)
        await _run(worker, lambda: len(seen) == 300)

    assert sorted(seen) == sorted(f"m{i}" for i in range(300))
    dequeues = spy.paths("/messages/dequeue")
    assert max(_asked(r) for r in dequeues) > 2, "fetched ahead of the two running handlers"
    assert len(dequeues) < 300 / 10, "in batches"
    assert len(spy.paths("/messages/acknowledge")) < 300 / 10
    assert _stats(live_target, queue) == (0, 0, 0, 0)


async def test_by_default_a_slow_handler_holds_only_the_message_it_runs(
    live_target: Target,
) -> None:
    queue = live_target.client().create_queue(unique("adaptive")).name
    live_target.client().enqueue_batch(queue, [f"m{i}" for i in range(4)])
    in_flight: list[int] = []

    async with live_target.async_client() as observer, live_target.async_client() as client:

        async def handler(message: Message) -> None:
            await asyncio.sleep(0.5)  # far slower than a dequeue round trip
            in_flight.append((await observer.get_queue(queue)).stats.in_flight)

        worker = Worker(client, queue, handler, concurrency=1, wait_seconds=1)
        await _run(worker, lambda: len(in_flight) == 4)

    assert in_flight == [1, 1, 1, 1], "nothing fetched ahead: the others stay for other consumers"
    assert _stats(live_target, queue) == (0, 0, 0, 0)


async def test_a_stop_mid_drain_acknowledges_every_handled_message_and_releases_the_rest(
    live_target: Target,
) -> None:
    queue = live_target.client().create_queue(unique("stop"), visibility_timeout_seconds=60).name
    for start in range(0, 500, 100):
        live_target.client().enqueue_batch(queue, [f"m{i}" for i in range(start, start + 100)])
    handled: list[str] = []
    worker: Worker | None = None

    async def handler(message: Message) -> None:
        handled.append(message.payload)
        if len(handled) == 150:
            assert worker is not None
            worker.stop()  # with batches held, fetched and asked for

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, concurrency=10, wait_seconds=1)
        await asyncio.wait_for(worker.run(), 60)

    assert len(handled) >= 150 and len(set(handled)) == len(handled)
    # Every handled message was acknowledged, every other one released at once: none is
    # left leased, none was lost.
    assert _stats(live_target, queue) == (500 - len(handled), 0, 0, 0)
    rest: list[str] = []
    while batch := live_target.client().dequeue_many(queue, 100):
        rest.extend(m.payload for m in batch)
    assert sorted(rest + handled) == sorted(f"m{i}" for i in range(500))


async def test_a_message_waiting_in_the_prefetch_buffer_keeps_its_lease(
    live_target: Target,
) -> None:
    # A 2 s lease, renewed each second (as in the three-leases test above).
    retsu = live_target.client()
    queue = retsu.create_queue(unique("lease"), visibility_timeout_seconds=2).name
    retsu.enqueue_batch(queue, ["first", "second"])
    other_got: list[Message] = []
    done: list[tuple[str, int]] = []

    async def handler(message: Message) -> None:
        if message.payload == "first":
            for _ in range(8):  # 4 s, two leases, while "second" waits in the buffer
                await asyncio.sleep(0.5)
                async with live_target.async_client() as other:
                    got = await other.dequeue(queue)
                if got is not None:
                    other_got.append(got)
        done.append((message.payload, message.delivery_attempts))

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, concurrency=1, prefetch=2, wait_seconds=1)
        await _run(worker, lambda: len(done) == 2, within=45)

    assert other_got == []
    assert done == [("first", 1), ("second", 1)]
    assert _stats(live_target, queue) == (0, 0, 0, 0)


def test_the_default_prefetch_follows_the_handlers_speed() -> None:
    worker = Worker(AsyncClient("http://retsu.test"), "q", print, concurrency=4)
    assert worker.adaptive and worker.prefetch == 4 + MAX_AHEAD
    assert worker._ahead() == 0, "nothing measured yet: no more than the slots"
    worker._round_trip = 0.010
    worker._handler_seconds = 0.0001  # 100 µs handlers, 10 ms round trips
    assert worker._ahead() == MAX_AHEAD
    worker._handler_seconds = 0.010
    assert worker._ahead() == 8  # what 4 slots finish in two round trips
    worker._handler_seconds = 0.5
    assert worker._ahead() == 0, "slower than a round trip: no more than it runs"
    worker._handler_seconds = 0.0001
    worker._payload_size = 1024 * 1024  # 1 MiB payloads: 32 MiB ahead at most
    assert worker._ahead() == 32

    fixed = Worker(AsyncClient("http://retsu.test"), "q", print, concurrency=4, prefetch=10)
    fixed._round_trip, fixed._handler_seconds = 0.010, 0.0001
    assert not fixed.adaptive and fixed._ahead() == 6


async def test_a_second_dequeue_goes_out_only_beside_a_backlog_and_for_a_full_batch() -> None:
    worker = Worker(AsyncClient("http://retsu.test"), "q", print, concurrency=1)
    worker._round_trip, worker._handler_seconds = 0.010, 0.00001
    assert worker._want() == MAX_BATCH
    first = asyncio.create_task(asyncio.sleep(10))
    second = asyncio.create_task(asyncio.sleep(10))
    try:
        worker._fetches[first] = 1
        worker._requested = MAX_BATCH
        assert worker._want() == 0, "no backlog seen: one (long-polling) dequeue at a time"
        worker._backlog = True
        assert worker._want() == MAX_BATCH  # room for another full batch
        worker._active = MAX_BATCH // 2  # half a batch held
        assert worker._want() == 0, "room for half a batch only: wait for a full one"
        worker._active = 0
        worker._failures = 1
        assert worker._want() == 0, "after a failure: one at a time"
        worker._failures = 0
        worker._fetches[second] = 0
        worker._requested = 2 * MAX_BATCH
        assert worker._want() == 0, "at most two"
    finally:
        first.cancel()
        second.cancel()


def test_release_backoff_doubles_up_to_the_cap() -> None:
    assert [release_delay(n, 2, 30) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]
    assert release_delay(1, 0.2, 10) == 1  # visibility is whole seconds, rounded up
    assert release_delay(40, 1, 100_000) == 21600  # the API's maximum


def test_the_consumer_name_says_host_and_process() -> None:
    name = default_consumer_name()

    host, pid, suffix = name.rsplit(":", 2)
    assert host == socket.gethostname()[:80] and pid == str(os.getpid()) and len(suffix) == 6
    assert default_consumer_name() != name


def test_options_are_checked() -> None:
    client = AsyncClient("http://retsu.test")
    with pytest.raises(ValueError):
        Worker(client, "q", print, concurrency=0)
    with pytest.raises(ValueError):
        Worker(client, "q", print, wait_seconds=21)
    assert Worker(client, "q", print, concurrency=4).prefetch == 4 + MAX_AHEAD  # adaptive
    assert Worker(client, "q", print, concurrency=4, prefetch=2).prefetch == 4
    assert Worker(client, "q", print, prefetch=100).prefetch == 100


async def test_a_failed_handler_tells_the_server_why(live_target: Target) -> None:
    retsu = live_target.client()
    queue = retsu.create_queue(unique("why"), max_delivery_attempts=2).name
    mid = retsu.enqueue(queue, "flaky").id
    handled: list[int] = []

    async def handler(message: Message) -> None:
        handled.append(message.delivery_attempts)
        if message.delivery_attempts == 1:
            raise KeyError("customer 42")
        raise RetryLater(600, "the bank is closed")

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, retry_base=0.1, wait_seconds=1)
        # The second release leaves a 600 s lease: done once its error is recorded.
        await _run(
            worker,
            lambda: (
                len(handled) == 2 and retsu.get_message(queue, mid).attempts[-1].error is not None
            ),
        )

    first, second = retsu.get_message(queue, mid).attempts
    # A backoff is a visibility change to a later time, not a release to 0: the attempt
    # ends with its lease (SPEC §3.11), the error stays on it.
    assert (first.outcome, first.error) == ("lease_expired", "KeyError: 'customer 42'")
    assert (second.outcome, second.error) == ("in_flight", "RetryLater: the bank is closed")
    assert first.consumer == second.consumer == worker.consumer_name


def test_an_error_is_the_exception_type_and_message_within_the_apis_bound() -> None:
    assert error_text(ValueError("bad input")) == "ValueError: bad input"
    assert error_text(TimeoutError()) == "TimeoutError"
    long = error_text(RuntimeError("x" * 10_000))
    assert len(long) == ERROR_MAX_LENGTH and long.startswith("RuntimeError: xx")
    assert long.endswith("…")


async def test_return_values_are_kept_as_results_and_none_stays_batched(
    live_target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    retsu = live_target.client()
    queue = retsu.create_queue(unique("results"), completed_retention_seconds=600).name
    payloads = ["text", "json", "none", "huge", "object", *[f"plain{i}" for i in range(10)]]
    ids = dict(zip(payloads, retsu.enqueue_batch(queue, payloads), strict=True))
    done: list[str] = []

    def handler(message: Message) -> object:
        done.append(message.payload)
        return {
            "text": "sent to ada@example.com",
            "json": {"receipt": "r-1", "amount": 12.5},
            "huge": "x" * (RESULT_MAX_LENGTH + 1),
            "object": object(),
        }.get(message.payload)

    client, spy = _spied(live_target)
    async with client:
        worker = Worker(client, queue, handler, concurrency=4, wait_seconds=1)
        await _run(
            worker, lambda: len(done) == len(payloads) and _stats(live_target, queue)[:2] == (0, 0)
        )

    results = {p: retsu.get_message(queue, ids[p]).result for p in payloads}
    assert results["text"] == "sent to ada@example.com"
    assert json.loads(results["json"] or "") == {"receipt": "r-1", "amount": 12.5}
    assert results["none"] is None
    assert results["huge"] is None and results["object"] is None  # logged, not truncated
    assert retsu.get_queue(queue).stats.completed == len(payloads)
    # Only the two messages with a result used the single acknowledge route
    # (/v1/queues/{queue}/messages/{id}/acknowledge); the rest went in batches.
    single = [r.url.path.split("/")[-2] for r in spy.paths("/acknowledge")]
    assert sorted(mid for mid in single if mid != "messages") == sorted([ids["text"], ids["json"]])
    assert "not JSON-serialisable" in caplog.text and "over the API's" in caplog.text


async def test_results_are_not_sent_to_a_queue_that_keeps_nothing(live_target: Target) -> None:
    retsu = live_target.client()
    queue = retsu.create_queue(unique("results")).name
    retsu.enqueue_batch(queue, [f"m{i}" for i in range(6)])
    done: list[str] = []

    async def handler(message: Message) -> str:
        done.append(message.payload)
        return "a result nobody keeps"

    client, spy = _spied(live_target)
    async with client:
        worker = Worker(client, queue, handler, concurrency=2, wait_seconds=1)
        await _run(worker, lambda: len(done) == 6 and _stats(live_target, queue)[:2] == (0, 0))

    acks = spy.paths("/acknowledge")
    assert acks and all(r.url.path.endswith("/messages/acknowledge") for r in acks)


async def test_results_start_once_the_queue_keeps_them(
    live_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "SETTINGS_REFRESH", 0.2)
    retsu = live_target.client()
    queue = retsu.create_queue(unique("results")).name
    done: list[str] = []

    async def handler(message: Message) -> str:
        done.append(message.id)
        return f"handled {message.payload}"

    async with live_target.async_client() as client:
        worker = Worker(client, queue, handler, wait_seconds=1)
        task = asyncio.create_task(worker.run())
        try:
            await _until(lambda: bool(worker._queue_id))  # started: it read "keeps nothing"
            assert not worker._keep_results
            retsu.update_queue(queue, completed_retention_seconds=600)
            await asyncio.sleep(1)  # the worker reads the settings again meanwhile
            retsu.enqueue(queue, "late")
            await _until(lambda: len(done) == 1 and _stats(live_target, queue)[:2] == (0, 0))
        finally:
            worker.stop()
            await asyncio.wait_for(task, 20)

    assert retsu.get_message(queue, done[0]).result == "handled late"
