"""Operator and consumer features end to end (SPEC §3.2–3.5): `retsu migrate`, then a
real `retsu api` process over HTTP, PostgreSQL underneath.

Time moves by shifting the stored timestamps (``advance_database_clock``); nobody sleeps.
Every test makes its own queues, so tests never see each other's messages.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.conftest import create_database, drop_database
from tests.support.processes import RetsuProcess, free_port, retsu_env, run_retsu
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock, plain_url

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def operator_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server, migrate=False)
    yield url
    await drop_database(postgres_server, url)


def _start_api(database_url: str, log_path: Path) -> tuple[RetsuProcess, str]:
    port = free_port()
    env = retsu_env(database_url)
    process = RetsuProcess(
        ["api"],
        {**env, "RETSU_HTTP__PORT": str(port), "RETSU_DATABASE__MAX_CONNECTIONS": "30"},
        log_path,
    )
    base = f"http://127.0.0.1:{port}"
    process.wait_until_ready(f"{base}/health/ready")
    return process, base


@pytest.fixture(scope="module")
def api(operator_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    migrated = run_retsu(["migrate"], retsu_env(operator_database))
    assert migrated.returncode == 0, migrated.stderr + migrated.stdout
    process, base = _start_api(operator_database, tmp_path_factory.mktemp("api") / "api.log")
    try:
        yield base
    finally:
        assert process.stop() == 0, process.output()


@pytest.fixture
async def client(api: str) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=api, timeout=30, limits=limits) as http:
        yield http


# -- helpers -------------------------------------------------------------------------------


def unique(prefix: str = "op") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def new_queue(client: httpx.AsyncClient, name: str | None = None, **settings: int) -> str:
    response = await client.post("/v1/queues", json={"name": name or unique(), **settings})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def enqueue(
    client: httpx.AsyncClient, queue_id: str, payload: str, priority: str = "MEDIUM", **extra: Any
) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages",
        json={"payload": payload, "priority": priority, **extra},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def dequeue(client: httpx.AsyncClient, queue_id: str, **body: Any) -> dict[str, Any] | None:
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue", json=body or None)
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    message: dict[str, Any] = response.json()
    return message


async def dequeue_many(client: httpx.AsyncClient, queue_id: str, n: int, **body: Any) -> list[Any]:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/dequeue", json={"max_messages": n, **body}
    )
    assert response.status_code == 200, response.text
    messages: list[Any] = response.json()["messages"]
    return messages


async def acknowledge(client: httpx.AsyncClient, queue_id: str, message: dict[str, Any]) -> int:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"]},
    )
    return response.status_code


async def visibility(
    client: httpx.AsyncClient, queue_id: str, message: dict[str, Any], seconds: int
) -> httpx.Response:
    return await client.post(
        f"/v1/queues/{queue_id}/messages/{message['id']}/visibility",
        json={"receipt_handle": message["receipt_handle"], "visibility_timeout_seconds": seconds},
    )


async def stats(client: httpx.AsyncClient, queue_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue_id}")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["stats"]
    return result


async def dead_letters(client: httpx.AsyncClient, queue_id: str, **params: Any) -> list[Any]:
    response = await client.get(
        f"/v1/queues/{queue_id}/dead-letters", params={"limit": 100, **params}
    )
    assert response.status_code == 200, response.text
    items: list[Any] = response.json()["items"]
    return items


async def audit(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/v1/audit-log", params={"limit": 100, **params})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def poison(
    client: httpx.AsyncClient, database_url: str, queue_id: str, *payloads: str
) -> list[str]:
    """Dead-letter ``payloads`` through a queue allowing one attempt: returns their ids."""
    ids = []
    if payloads:
        response = await client.post(
            f"/v1/queues/{queue_id}/messages/batch",
            json={"messages": [{"payload": p, "priority": "LOW"} for p in payloads]},
        )
        assert response.status_code == 201, response.text
        ids = response.json()["ids"]
    taken = await dequeue_many(client, queue_id, len(payloads), visibility_timeout_seconds=5)
    assert len(taken) == len(payloads)
    await advance_database_clock(database_url, 6)
    assert await dequeue(client, queue_id) is None  # moves them to dead-letter storage
    return list(ids)


def problem_code(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    return str(response.json()["code"])


# -- idempotent enqueue --------------------------------------------------------------------


async def test_racing_idempotent_enqueues_store_exactly_one_message(
    client: httpx.AsyncClient,
) -> None:
    queue_id = await new_queue(client)
    body = {"payload": "charge order 42", "priority": "HIGH", "ttl_seconds": 600}

    async def attempt() -> httpx.Response:
        return await client.post(
            f"/v1/queues/{queue_id}/messages", json=body, headers={"idempotency-key": "order-42"}
        )

    responses = await asyncio.gather(*(attempt() for _ in range(20)))

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 19 + [201], [r.text for r in responses]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    for response in responses:
        if response.status_code == 200:
            assert response.headers["idempotent-replayed"] == "true"
        else:
            assert "idempotent-replayed" not in response.headers
    assert (await stats(client, queue_id))["ready"] == 1
    delivered = await dequeue_many(client, queue_id, 10)
    assert [m["id"] for m in delivered] == list(ids)


async def test_an_idempotency_key_outlives_the_consumed_message(
    client: httpx.AsyncClient,
) -> None:
    queue_id = await new_queue(client)
    headers = {"idempotency-key": "once"}
    body = {"payload": "p", "priority": "LOW"}
    first = await client.post(f"/v1/queues/{queue_id}/messages", json=body, headers=headers)
    assert first.status_code == 201
    message = await dequeue(client, queue_id)
    assert message is not None and message["id"] == first.json()["id"]
    assert await acknowledge(client, queue_id, message) == 204

    again = await client.post(f"/v1/queues/{queue_id}/messages", json=body, headers=headers)
    assert (again.status_code, again.json()) == (200, first.json())
    assert again.headers["idempotent-replayed"] == "true"
    assert await dequeue(client, queue_id) is None  # nothing was stored again

    other = {"payload": "different", "priority": "LOW"}
    conflict = await client.post(f"/v1/queues/{queue_id}/messages", json=other, headers=headers)
    assert problem_code(conflict, 409) == "idempotency_key_conflict"
    batch = await client.post(
        f"/v1/queues/{queue_id}/messages/batch", json={"messages": [body]}, headers=headers
    )
    assert problem_code(batch, 400) == "invalid_idempotency_key"
    bad = await client.post(
        f"/v1/queues/{queue_id}/messages", json=body, headers={"idempotency-key": "x" * 129}
    )
    assert problem_code(bad, 400) == "invalid_idempotency_key"


async def test_a_batch_is_all_or_nothing(client: httpx.AsyncClient) -> None:
    queue_id = await new_queue(client)
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/batch",
        json={
            "messages": [
                {"payload": "ok-1", "priority": "HIGH"},
                {"payload": "ok-2", "priority": "LOW"},
                {"payload": "bad", "priority": "URGENT"},
            ]
        },
    )
    assert problem_code(response, 400) == "invalid_priority"
    assert "messages[2]" in response.json()["detail"]
    assert (await stats(client, queue_id))["ready"] == 0
    assert await dequeue(client, queue_id) is None


# -- visibility and delay ------------------------------------------------------------------


async def test_visibility_extend_release_and_stale(
    client: httpx.AsyncClient, operator_database: str
) -> None:
    queue_id = await new_queue(client, visibility_timeout_seconds=10)
    await enqueue(client, queue_id, "work")
    first = await dequeue(client, queue_id)
    assert first is not None

    extended = await visibility(client, queue_id, first, 120)
    assert extended.status_code == 204 and extended.content == b""
    await advance_database_clock(operator_database, 100)
    assert await dequeue(client, queue_id) is None, "the extended lease ended early"
    await advance_database_clock(operator_database, 21)
    second = await dequeue(client, queue_id)
    assert second is not None
    assert (second["id"], second["delivery_attempts"]) == (first["id"], 2)

    stale = await visibility(client, queue_id, first, 30)
    assert problem_code(stale, 409) == "stale_receipt_handle"

    released = await visibility(client, queue_id, second, 0)
    assert released.status_code == 204
    third = await dequeue(client, queue_id)
    assert third is not None
    assert (third["id"], third["delivery_attempts"]) == (first["id"], 3)
    assert await acknowledge(client, queue_id, second) == 204  # stale: removes nothing
    assert (await stats(client, queue_id))["in_flight"] == 1

    out_of_range = await visibility(client, queue_id, third, 21_601)
    assert problem_code(out_of_range, 400) == "invalid_visibility_timeout"
    missing = await client.post(
        f"/v1/queues/{uuid.uuid4()}/messages/{third['id']}/visibility",
        json={"receipt_handle": third["receipt_handle"], "visibility_timeout_seconds": 5},
    )
    assert problem_code(missing, 404) == "queue_not_found"
    assert await acknowledge(client, queue_id, third) == 204
    assert await dequeue(client, queue_id) is None


async def test_a_delayed_message_is_delivered_after_its_delay(
    client: httpx.AsyncClient, operator_database: str
) -> None:
    queue_id = await new_queue(client)
    delayed = await enqueue(client, queue_id, "later", "HIGH", delay_seconds=60)
    await enqueue(client, queue_id, "now", "LOW")
    now = await dequeue(client, queue_id)
    assert now is not None and now["payload"] == "now"
    assert await dequeue(client, queue_id) is None
    assert (await stats(client, queue_id))["delayed"] == 1
    await advance_database_clock(operator_database, 61)
    later = await dequeue(client, queue_id)
    assert later is not None and later["id"] == delayed
    too_long = await client.post(
        f"/v1/queues/{queue_id}/messages",
        json={"payload": "x", "priority": "LOW", "ttl_seconds": 10, "delay_seconds": 10},
    )
    assert problem_code(too_long, 400) == "invalid_delay"


# -- pause, purge, delete ------------------------------------------------------------------


async def test_pause_and_resume_are_honoured_by_dequeue(client: httpx.AsyncClient) -> None:
    queue_id = await new_queue(client)
    await enqueue(client, queue_id, "before")
    paused = await client.post(f"/v1/queues/{queue_id}/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert await dequeue(client, queue_id) is None
    assert await dequeue_many(client, queue_id, 10) == []
    await enqueue(client, queue_id, "while paused")  # enqueue still works
    assert (await client.get(f"/v1/queues/{queue_id}")).json()["paused"] is True
    resumed = await client.post(f"/v1/queues/{queue_id}/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    delivered = await dequeue_many(client, queue_id, 10)
    assert [m["payload"] for m in delivered] == ["before", "while paused"]


async def test_an_operator_action_that_cannot_get_its_locks_answers_busy(
    client: httpx.AsyncClient, operator_database: str
) -> None:
    queue_id = await new_queue(client)
    await enqueue(client, queue_id, "kept")
    holder = await asyncpg.connect(plain_url(operator_database))
    try:
        async with holder.transaction():
            # Someone keeps the queue row locked (a long schema change, a stuck session).
            await holder.execute(
                "SELECT 1 FROM queue WHERE id = $1 FOR UPDATE", uuid.UUID(queue_id)
            )
            purged = await client.post(f"/v1/queues/{queue_id}/purge")
            assert purged.status_code == 503, purged.text
            assert purged.headers["retry-after"].isdigit()
            assert purged.headers["content-type"].startswith("application/problem+json")
            assert purged.json()["code"] == "busy"
    finally:
        await holder.close()
    # Nothing changed, and the same request succeeds once the lock is gone.
    assert (await stats(client, queue_id))["ready"] == 1
    purged = await client.post(f"/v1/queues/{queue_id}/purge")
    assert (purged.status_code, purged.json()) == (200, {"purged": 1})


async def test_purge_and_delete(client: httpx.AsyncClient, operator_database: str) -> None:
    name = unique("doomed")
    queue_id = await new_queue(client, name, max_delivery_attempts=1)
    await poison(client, operator_database, queue_id, "dead-1", "dead-2")
    for i in range(5):
        await enqueue(client, queue_id, f"m{i}", "HIGH")
    await enqueue(client, queue_id, "delayed", delay_seconds=600)
    await dequeue(client, queue_id)  # one in flight

    purged = await client.post(f"/v1/queues/{queue_id}/purge")
    assert (purged.status_code, purged.json()) == (200, {"purged": 6})
    after = await stats(client, queue_id)
    assert (after["ready"], after["in_flight"], after["delayed"]) == (0, 0, 0)
    assert after["dead_letters"] == 2
    assert len(await dead_letters(client, queue_id)) == 2

    await enqueue(client, queue_id, "left behind")
    await client.post(
        f"/v1/queues/{queue_id}/messages",
        json={"payload": "k", "priority": "LOW"},
        headers={"idempotency-key": "kept"},
    )
    deleted = await client.delete(f"/v1/queues/{queue_id}")
    assert deleted.status_code == 204 and deleted.content == b""
    assert problem_code(await client.get(f"/v1/queues/{queue_id}"), 404) == "queue_not_found"
    gone = await client.get(f"/v1/queues/{queue_id}/dead-letters")
    assert problem_code(gone, 404) == "queue_not_found"
    assert problem_code(await client.delete(f"/v1/queues/{queue_id}"), 404) == "queue_not_found"

    connection = await asyncpg.connect(plain_url(operator_database))
    try:
        for table in (
            "queue_message",
            "queue_dead_letter_message",
            "idempotency_key",
            "queue_state_rollup",
        ):
            left = await connection.fetchval(
                f"SELECT count(*) FROM {table} WHERE queue_id = $1", uuid.UUID(queue_id)
            )
            assert left == 0, table
    finally:
        await connection.close()

    reborn = await new_queue(client, name)
    assert reborn != queue_id
    assert await stats(client, reborn) == {
        "ready": 0,
        "in_flight": 0,
        "delayed": 0,
        "dead_letters": 0,
        "oldest_ready_age_seconds": 0.0,
        "groups": 0,
        "completed": 0,
    }
    listed = (await client.get("/v1/queues", params={"name": name})).json()
    assert [q["id"] for q in listed["items"]] == [reborn]
    fresh = await client.post(
        f"/v1/queues/{reborn}/messages",
        json={"payload": "k", "priority": "LOW"},
        headers={"idempotency-key": "kept"},
    )
    assert fresh.status_code == 201  # the old queue's keys went with it


# -- dead letters --------------------------------------------------------------------------


async def test_dead_letters_browse_redrive_bulk_and_delete(
    client: httpx.AsyncClient, operator_database: str
) -> None:
    name = unique("dlq")
    queue_id = await new_queue(client, name, max_delivery_attempts=1)
    first_batch = await poison(client, operator_database, queue_id, "a", "b", "c")
    second_batch = await poison(client, operator_database, queue_id, "d", "e")
    third_batch = await poison(client, operator_database, queue_id, "f")
    oldest_first = first_batch + second_batch + third_batch

    listed = await dead_letters(client, queue_id)
    assert [d["id"] for d in listed] == list(reversed(oldest_first))
    assert [d["payload"] for d in listed] == ["f", "e", "d", "c", "b", "a"]
    assert all(d["reason"] == "MAX_DELIVERY_ATTEMPTS_EXHAUSTED" for d in listed)
    assert all(d["delivery_attempts"] == 1 for d in listed)
    assert (await stats(client, queue_id))["dead_letters"] == 6

    paged: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 4}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get(f"/v1/queues/{queue_id}/dead-letters", params=params)).json()
        paged += [d["id"] for d in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert paged == list(reversed(oldest_first))

    one = await client.get(f"/v1/queues/{queue_id}/dead-letters/{first_batch[1]}")
    assert one.status_code == 200 and one.json() == listed[-2]

    redriven = await client.post(f"/v1/queues/{queue_id}/dead-letters/{third_batch[0]}/redrive")
    assert redriven.status_code == 201
    new_id = redriven.json()["id"]
    assert new_id not in oldest_first and uuid.UUID(new_id).version == 7
    gone = await client.get(f"/v1/queues/{queue_id}/dead-letters/{third_batch[0]}")
    assert problem_code(gone, 404) == "dead_letter_not_found"
    again = await client.post(f"/v1/queues/{queue_id}/dead-letters/{third_batch[0]}/redrive")
    assert problem_code(again, 404) == "dead_letter_not_found"

    deleted = await client.delete(f"/v1/queues/{queue_id}/dead-letters/{first_batch[2]}")
    assert deleted.status_code == 204
    missing = await client.delete(f"/v1/queues/{queue_id}/dead-letters/{first_batch[2]}")
    assert problem_code(missing, 404) == "dead_letter_not_found"

    bulk = await client.post(f"/v1/queues/{queue_id}/dead-letters/redrive", json={"limit": 3})
    assert (bulk.status_code, bulk.json()) == (200, {"redriven": 3})
    remaining = await dead_letters(client, queue_id)
    assert [d["payload"] for d in remaining] == ["e"]
    rest = await client.post(f"/v1/queues/{queue_id}/dead-letters/redrive")
    assert rest.json() == {"redriven": 1}
    assert (await client.post(f"/v1/queues/{queue_id}/dead-letters/redrive")).json() == {
        "redriven": 0
    }

    # Back on the queue: the single redrive first, then the bulk ones, oldest first.
    delivered = await dequeue_many(client, queue_id, 10)
    assert [m["payload"] for m in delivered] == ["f", "a", "b", "d", "e"]
    assert delivered[0]["id"] == new_id
    assert all(m["delivery_attempts"] == 1 for m in delivered)
    assert (await stats(client, queue_id))["dead_letters"] == 0

    metrics = (await client.get("/metrics")).text
    assert f'queue_messages_redriven_total{{queue_name="{name}"}} 5.0' in metrics


# -- the audit log -------------------------------------------------------------------------


async def test_every_operator_action_is_audited_and_failures_are_not(
    client: httpx.AsyncClient, operator_database: str
) -> None:
    def rid(step: str) -> dict[str, str]:
        return {"x-request-id": f"audit-{step}"}

    name = unique("audited")
    created = await client.post(
        "/v1/queues", json={"name": name, "max_delivery_attempts": 1}, headers=rid("create")
    )
    queue_id = created.json()["id"]
    await client.patch(
        f"/v1/queues/{queue_id}", json={"visibility_timeout_seconds": 9}, headers=rid("update")
    )
    await client.post(f"/v1/queues/{queue_id}/pause", headers=rid("pause"))
    await client.post(f"/v1/queues/{queue_id}/resume", headers=rid("resume"))
    dead = await poison(client, operator_database, queue_id, "x", "y", "z")
    await client.post(f"/v1/queues/{queue_id}/dead-letters/{dead[0]}/redrive", headers=rid("r1"))
    await client.delete(f"/v1/queues/{queue_id}/dead-letters/{dead[1]}", headers=rid("dl"))
    await client.post(f"/v1/queues/{queue_id}/dead-letters/redrive", headers=rid("bulk"))
    await client.post(f"/v1/queues/{queue_id}/purge", headers=rid("purge"))

    # Failed actions: none of these may leave a row.
    missing = str(uuid.uuid4())
    failures = [
        await client.post("/v1/queues", json={"name": name}),
        await client.patch(f"/v1/queues/{missing}", json={"max_delivery_attempts": 2}),
        await client.patch(f"/v1/queues/{queue_id}", json={}),
        await client.post(f"/v1/queues/{missing}/pause"),
        await client.post(f"/v1/queues/{missing}/purge"),
        await client.post(f"/v1/queues/{queue_id}/dead-letters/{missing}/redrive"),
        await client.delete(f"/v1/queues/{queue_id}/dead-letters/{missing}"),
        await client.post(f"/v1/queues/{queue_id}/dead-letters/redrive", json={"limit": 0}),
    ]
    assert [r.status_code for r in failures] == [409, 404, 400, 404, 404, 404, 404, 400]

    await client.delete(f"/v1/queues/{queue_id}", headers=rid("delete"))

    rows = await audit(client, queue_id=queue_id)
    assert [(r["action"], r["request_id"]) for r in rows] == [
        ("queue.deleted", "audit-delete"),
        ("queue.purged", "audit-purge"),
        ("dead_letter.redriven", "audit-bulk"),
        ("dead_letter.deleted", "audit-dl"),
        ("dead_letter.redriven", "audit-r1"),
        ("queue.resumed", "audit-resume"),
        ("queue.paused", "audit-pause"),
        ("queue.updated", "audit-update"),
        ("queue.created", "audit-create"),
    ]
    assert all(r["actor"] == "anonymous" for r in rows)
    by_request = {r["request_id"]: r for r in rows}
    assert by_request["audit-create"]["details"]["name"] == name
    assert by_request["audit-update"]["details"] == {"changes": {"visibility_timeout_seconds": 9}}
    assert by_request["audit-purge"]["details"] == {"purged": 2}
    bulk_details = by_request["audit-bulk"]["details"]
    # The bulk redrive names the record it moved ("z": the other two went before).
    assert list(bulk_details.pop("new_message_ids")) == [dead[2]]
    assert bulk_details == {"limit": 100, "redriven": 1}
    assert (by_request["audit-r1"]["target_type"], by_request["audit-r1"]["target_id"]) == (
        "dead_letter",
        dead[0],
    )
    assert by_request["audit-delete"]["details"] == {
        "name": name,
        "messages": 0,
        "dead_letters": 0,
    }
    assert await audit(client, queue_id=missing) == []
    deletions = await audit(client, queue_id=queue_id, action="queue.deleted")
    assert [r["request_id"] for r in deletions] == ["audit-delete"]

    # Paging the unfiltered log reaches the same rows in the same order.
    newest = (await client.get("/v1/audit-log", params={"limit": 3})).json()
    assert len(newest["items"]) == 3 and newest["next_cursor"]
    assert newest["items"][0]["action"] == "queue.deleted"


# -- cursors -------------------------------------------------------------------------------


def _flip_last(token: str) -> str:
    return token[:-1] + ("A" if token[-1] != "A" else "B")


async def test_forged_and_malformed_cursors_are_invalid_cursor(
    client: httpx.AsyncClient, operator_database: str, tmp_path: Path
) -> None:
    prefix = unique("cur")
    for i in range(3):
        await new_queue(client, f"{prefix}-{i}")
    queue_id = await new_queue(client, max_delivery_attempts=1)
    await poison(client, operator_database, queue_id, "a", "b")
    queues_cursor = (await client.get("/v1/queues", params={"limit": 1})).json()["next_cursor"]
    dead_cursor = (
        await client.get(f"/v1/queues/{queue_id}/dead-letters", params={"limit": 1})
    ).json()["next_cursor"]
    audit_cursor = (await client.get("/v1/audit-log", params={"limit": 1})).json()["next_cursor"]
    assert queues_cursor and dead_cursor and audit_cursor

    forged_payload = (
        base64.urlsafe_b64encode(json.dumps([1, "q", [None], ""]).encode() + b"\x00" * 16)
        .decode()
        .rstrip("=")
    )
    bad = [
        "",
        "garbage",
        "!!!",
        "a" * 5000,
        _flip_last(queues_cursor),
        queues_cursor[:-4],
        queues_cursor + "AAAA",
        forged_payload,
        dead_cursor,  # another list's cursor
        audit_cursor,
    ]
    for cursor in bad:
        response = await client.get("/v1/queues", params={"cursor": cursor})
        assert problem_code(response, 400) == "invalid_cursor", cursor
    for cursor in ("junk", _flip_last(dead_cursor), queues_cursor):
        response = await client.get(
            f"/v1/queues/{queue_id}/dead-letters", params={"cursor": cursor}
        )
        assert problem_code(response, 400) == "invalid_cursor", cursor
    for cursor in ("junk", _flip_last(audit_cursor), dead_cursor):
        response = await client.get("/v1/audit-log", params={"cursor": cursor})
        assert problem_code(response, 400) == "invalid_cursor", cursor

    # The signing key is shared through the database: another API process opens the
    # cursors this one issued.
    process, base = _start_api(operator_database, tmp_path / "second-api.log")
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as other:
            for path, cursor in (
                ("/v1/queues", queues_cursor),
                (f"/v1/queues/{queue_id}/dead-letters", dead_cursor),
                ("/v1/audit-log", audit_cursor),
            ):
                mine = await client.get(path, params={"limit": 1, "cursor": cursor})
                theirs = await other.get(path, params={"limit": 1, "cursor": cursor})
                assert theirs.status_code == 200, theirs.text
                assert theirs.json()["items"] == mine.json()["items"]
    finally:
        assert process.stop() == 0, process.output()


async def test_listing_queues_walks_every_queue_once_in_byte_order(
    client: httpx.AsyncClient,
) -> None:
    prefix = unique("walk")
    names = [f"{prefix}-{suffix}" for suffix in ("b", "a", "0", "z9", "a.1", "a_1", "a-1")]
    for name in names:
        await new_queue(client, name)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get("/v1/queues", params=params)).json()
        seen += [q["name"] for q in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    mine = [n for n in seen if n.startswith(prefix)]
    assert mine == sorted(names, key=str.encode)
    assert seen == sorted(seen, key=str.encode) and len(seen) == len(set(seen))


# -- stats ---------------------------------------------------------------------------------


async def test_stats_are_exact_after_a_scripted_workload(
    client: httpx.AsyncClient, operator_database: str
) -> None:
    queue_id = await new_queue(client, max_delivery_attempts=2, visibility_timeout_seconds=30)
    # 4 exhausted → dead letters (two deliveries each, then a dequeue moves them).
    await client.post(
        f"/v1/queues/{queue_id}/messages/batch",
        json={"messages": [{"payload": f"p{i}", "priority": "LOW"} for i in range(4)]},
    )
    for _ in range(2):
        assert len(await dequeue_many(client, queue_id, 4)) == 4
        await advance_database_clock(operator_database, 31)
    assert await dequeue(client, queue_id) is None
    # Now the rest, oldest first.
    for i in range(3):
        await enqueue(client, queue_id, f"short{i}", "MEDIUM", ttl_seconds=50)  # will expire
    await advance_database_clock(operator_database, 10)
    for i in range(6):
        await enqueue(client, queue_id, f"high{i}", "HIGH")
    for i in range(2):
        await enqueue(client, queue_id, f"later{i}", "LOW", delay_seconds=300)
    leased = await dequeue_many(client, queue_id, 4)  # 4 HIGH in flight
    assert [m["payload"] for m in leased] == ["high0", "high1", "high2", "high3"]
    await acknowledge(client, queue_id, leased[0])
    released = await visibility(client, queue_id, leased[1], 0)  # ready again, attempt 1 of 2
    assert released.status_code == 204
    await advance_database_clock(operator_database, 45)  # "short*" expire (55 s old)

    result = await stats(client, queue_id)

    # ready: high1 (released), high4, high5, and high2/high3 too: 45 s after the claim
    # their 30 s leases have ended with attempts left. The expired "short*" count in none;
    # "later*" wait for their delay. The oldest ready message (high*) is 45 s old.
    assert result["ready"] == 5
    assert result["in_flight"] == 0
    assert result["delayed"] == 2
    assert result["dead_letters"] == 4
    assert 45 <= result["oldest_ready_age_seconds"] < 60

    taken = await dequeue_many(client, queue_id, 2, visibility_timeout_seconds=600)
    after = await stats(client, queue_id)
    assert (after["ready"], after["in_flight"], after["delayed"]) == (3, 2, 2)
    assert [m["payload"] for m in taken] == ["high1", "high2"]
