"""Retries (SPEC §9): what is retried, how long it waits, when it gives up — and that a
retried enqueue never stores a message twice, even when the connection drops after the
server committed (against the fake and a real server)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import msgspec
import pytest

from client_support import DropAfterSend, Target, async_inner, unique
from retsu_client import (
    AsyncClient,
    Client,
    ConnectionFailed,
    DatabaseUnavailable,
    RetryPolicy,
    ServerError,
    ServiceUnavailable,
)
from retsu_client.errors import Busy
from retsu_client.retry import parse_retry_after

QUEUE_ID = "01a20000-0000-7000-8000-00000000000a"
POLICY = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, deadline=60)


def _problem(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"type": "about:blank", "title": "x", "status": status, "detail": "d", "code": code}
    return httpx.Response(
        status,
        content=msgspec.json.encode(body),
        headers={"content-type": "application/problem+json", **(headers or {})},
    )


class Script:
    """A transport that answers from a list (a Response, or an exception to raise)."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _client(script: Script, policy: RetryPolicy = POLICY) -> tuple[Client, list[float]]:
    client = Client("http://retsu.test", transport=httpx.MockTransport(script), retry=policy)
    waits: list[float] = []
    client._sleep = waits.append
    return client, waits


PURGED = httpx.Response(200, json={"purged": 2})
ENQUEUED = httpx.Response(201, json={"id": "01a20000-0000-7000-8000-0000000000ff"})


def test_a_503_is_retried_until_it_succeeds_and_honours_retry_after() -> None:
    script = Script(
        _problem(503, "database_unavailable", {"retry-after": "2"}),
        _problem(502, "http_502"),
        httpx.Response(200, json={"items": [], "next_cursor": None}),
    )
    client, waits = _client(script)

    assert client.list_queues().items == []

    assert len(script.requests) == 3
    assert waits[0] >= 2  # the server asked for 2 s
    assert 0 <= waits[1] <= 0.02  # jittered, attempt 2: up to base * 2
    ids = {r.headers["x-request-id"] for r in script.requests}
    assert len(ids) == 1, "one request id across the retries of one call"


def test_attempts_are_bounded() -> None:
    script = Script(*[_problem(503, "database_unavailable")] * 4)
    client, waits = _client(script)

    with pytest.raises(DatabaseUnavailable) as error:
        client.list_queues()

    assert len(script.requests) == 4 and len(waits) == 3
    assert error.value.status == 503


def test_the_deadline_bounds_the_waiting() -> None:
    script = Script(_problem(503, "busy", {"retry-after": "120"}), PURGED)
    client, waits = _client(script, RetryPolicy(max_attempts=5, deadline=10))

    with pytest.raises(Busy):
        client.purge_queue(QUEUE_ID)

    assert waits == [] and len(script.requests) == 1


def test_waits_grow_exponentially_with_full_jitter() -> None:
    policy = RetryPolicy(max_attempts=6, base_delay=1, max_delay=4, deadline=1000)
    schedule = policy.schedule(clock=lambda: 0.0)

    waits = [schedule.next_delay() for _ in range(6)]

    ceilings = [1, 2, 4, 4, 4]
    assert all(w is not None and 0 <= w <= c for w, c in zip(waits, ceilings, strict=False))
    assert waits[5] is None


def test_a_call_that_may_repeat_work_is_not_retried_after_it_may_have_arrived() -> None:
    """Purge again after a lost answer would remove messages enqueued in between."""
    for failure in (_problem(503, "database_unavailable"), httpx.ReadError("reset")):
        script = Script(failure, PURGED)
        client, _ = _client(script)
        with pytest.raises((ServiceUnavailable, ConnectionFailed)):
            client.purge_queue(QUEUE_ID)
        assert len(script.requests) == 1


def test_a_refusal_that_did_nothing_is_retried_for_any_call() -> None:
    for refusal in (
        _problem(503, "busy"),
        _problem(429, "too_many_requests"),
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow connect"),
    ):
        script = Script(refusal, PURGED)
        client, _ = _client(script)
        assert client.purge_queue(QUEUE_ID) == 2
        assert len(script.requests) == 2


def test_an_enqueue_is_retried_under_one_idempotency_key() -> None:
    script = Script(httpx.ReadError("reset"), _problem(504, "http_504"), ENQUEUED)
    client, _ = _client(script)

    client.enqueue(QUEUE_ID, "once")

    keys = [r.headers.get("idempotency-key") for r in script.requests]
    assert len(keys) == 3 and keys[0] and len(set(keys)) == 1


def test_each_enqueue_call_gets_its_own_key_unless_one_is_given() -> None:
    script = Script(ENQUEUED, ENQUEUED, ENQUEUED)
    client, _ = _client(script)

    client.enqueue(QUEUE_ID, "a")
    client.enqueue(QUEUE_ID, "a")
    client.enqueue(QUEUE_ID, "a", idempotency_key="mine")

    keys = [r.headers["idempotency-key"] for r in script.requests]
    assert keys[0] != keys[1] and keys[2] == "mine"


def test_without_a_key_an_enqueue_is_retried_only_when_it_never_left() -> None:
    lost = Script(httpx.ReadError("reset"), ENQUEUED)
    client, _ = _client(lost)
    with pytest.raises(ConnectionFailed) as error:
        client.enqueue(QUEUE_ID, "maybe stored", idempotent=False)
    assert len(lost.requests) == 1
    assert "idempotency-key" not in lost.requests[0].headers
    assert error.value.request_id == lost.requests[0].headers["x-request-id"]

    refused = Script(httpx.ConnectError("refused"), ENQUEUED)
    client, _ = _client(refused)
    client.enqueue(QUEUE_ID, "never arrived the first time", idempotent=False)
    assert len(refused.requests) == 2


def test_a_batch_enqueue_is_retried_only_when_it_never_left() -> None:
    ids = httpx.Response(201, json={"ids": ["01a20000-0000-7000-8000-0000000000fe"]})
    for failure, attempts in (
        (httpx.ConnectError("refused"), 2),
        (httpx.ReadError("reset"), 1),
        (_problem(503, "database_unavailable"), 1),
        (_problem(502, "http_502"), 1),
    ):
        script = Script(failure, ids)
        client, _ = _client(script)
        with contextlib.suppress(ConnectionFailed, ServerError):
            client.enqueue_batch(QUEUE_ID, ["a"])
        assert len(script.requests) == attempts, failure


def test_reads_acknowledge_visibility_and_dequeue_are_retried_after_a_lost_answer() -> None:
    queue = {
        "id": QUEUE_ID,
        "name": "q",
        "visibility_timeout_seconds": 30,
        "max_delivery_attempts": 5,
        "default_message_ttl_seconds": 60,
        "paused": False,
        "stats": {
            "ready": 0,
            "in_flight": 0,
            "delayed": 0,
            "dead_letters": 0,
            "oldest_ready_age_seconds": 0,
        },
    }
    calls: list[tuple[Callable[[Client], object], httpx.Response]] = [
        (lambda c: c.get_queue(QUEUE_ID), httpx.Response(200, json=queue)),
        (lambda c: c.acknowledge(QUEUE_ID, QUEUE_ID, "h"), httpx.Response(204)),
        (
            lambda c: c.change_visibility(QUEUE_ID, QUEUE_ID, 5, receipt_handle="h"),
            httpx.Response(204),
        ),
        (lambda c: c.dequeue(QUEUE_ID), httpx.Response(204)),
        (lambda c: c.pause_queue(QUEUE_ID), httpx.Response(200, json={**queue, "paused": True})),
    ]
    for call, success in calls:
        script = Script(httpx.ReadError("reset"), success)
        client, _ = _client(script)
        call(client)
        assert len(script.requests) == 2


def test_a_proxy_error_page_becomes_a_server_error() -> None:
    script = Script(*[httpx.Response(502, text="<html>Bad Gateway</html>")] * 4)
    client, _ = _client(script)

    with pytest.raises(ServerError) as error:
        client.list_queues()

    assert (error.value.status, error.value.code) == (502, "http_502")


def test_retry_after_is_read_as_seconds_or_as_a_date() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)

    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(date, now=lambda: now) == 30.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_no_retries_when_disabled() -> None:
    script = Script(httpx.ConnectError("refused"), PURGED)
    client, _ = _client(script, RetryPolicy.none())

    with pytest.raises(ConnectionFailed):
        client.purge_queue(QUEUE_ID)
    assert len(script.requests) == 1


# --- a dropped connection after the server committed (fake and real server) -------------


def _is_enqueue(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/messages")


def _is_batch(request: httpx.Request) -> bool:
    return request.url.path.endswith("/messages/batch")


def _inner(target: Target) -> httpx.BaseTransport:
    transport = target.transport()
    assert transport is None or isinstance(transport, httpx.BaseTransport)
    return transport or httpx.HTTPTransport()


def test_a_retried_enqueue_stores_the_message_exactly_once(target: Target) -> None:
    queue = target.client().create_queue(unique("retry")).name
    dropping = DropAfterSend(_inner(target), _is_enqueue, drops=2)
    retsu = target.client(transport=dropping)

    sent = retsu.enqueue(queue, "exactly once")

    enqueues = [r for r in dropping.sent if _is_enqueue(r)]
    assert len(enqueues) == 3, "two answers were lost after the server stored the message"
    assert len({r.headers["idempotency-key"] for r in enqueues}) == 1
    assert sent.replayed is True
    assert target.client().get_queue(queue).stats.ready == 1
    (message,) = target.client().dequeue_many(queue, 10)
    assert (message.id, message.payload) == (sent.id, "exactly once")


async def test_a_retried_async_enqueue_stores_the_message_exactly_once(target: Target) -> None:
    queue = target.client().create_queue(unique("retry")).name
    dropping = DropAfterSend(async_inner(target), _is_enqueue)

    async with target.async_client(transport=dropping) as retsu:
        sent = await retsu.enqueue_json(queue, {"n": 1})

    assert sent.replayed is True
    assert target.client().get_queue(queue).stats.ready == 1


def test_without_a_key_a_lost_answer_is_reported_not_retried(target: Target) -> None:
    queue = target.client().create_queue(unique("retry")).name
    retsu = target.client(transport=DropAfterSend(_inner(target), _is_enqueue))

    with pytest.raises(ConnectionFailed):
        retsu.enqueue(queue, "stored once, answer lost", idempotent=False)

    assert target.client().get_queue(queue).stats.ready == 1


def test_a_batch_whose_answer_was_lost_is_not_sent_again(target: Target) -> None:
    queue = target.client().create_queue(unique("retry")).name
    retsu = target.client(transport=DropAfterSend(_inner(target), _is_batch))

    with pytest.raises(ConnectionFailed):
        retsu.enqueue_batch(queue, ["a", "b", "c"])

    assert target.client().get_queue(queue).stats.ready == 3


def test_an_unreachable_server_is_connection_failed() -> None:
    client = Client(
        "http://127.0.0.1:9", retry=RetryPolicy(max_attempts=2, base_delay=0.01), timeout=2
    )
    with pytest.raises(ConnectionFailed) as error:
        client.list_queues()
    assert "127.0.0.1:9" in str(error.value)


async def test_the_async_client_retries_the_same_way() -> None:
    script = Script(_problem(503, "database_unavailable"), PURGED)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    client = AsyncClient("http://retsu.test", transport=httpx.MockTransport(script), retry=POLICY)
    client._sleep = sleep
    async with client:
        with pytest.raises(ServiceUnavailable):
            await client.purge_queue(QUEUE_ID)  # not repeatable: no retry
        script.answers = [
            _problem(503, "database_unavailable"),
            httpx.Response(200, json={"items": [], "next_cursor": None}),
        ]
        assert (await client.list_queues()).items == []
    assert len(waits) == 1
