"""SPEC §3.10 and §3.11 over HTTP, on the memory twin: results and errors, attempts,
completed messages, search by group and payload, the groups list, stats, bulk actions with
a dry run, and the throttling metric."""

from __future__ import annotations

import json
from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

ATTEMPT_KEYS = {"number", "delivered_at", "consumer", "ended_at", "outcome", "error"}
GROUP_KEYS = {
    "group",
    "ready",
    "in_flight",
    "delayed",
    "head_id",
    "head_delivery_attempts",
    "head_enqueued_at",
    "last_delivered_at",
    "state",
}


async def _send(client: Client, qid: str, payload: str, **extra: Any) -> str:
    response = await client.post(
        f"/v1/queues/{qid}/messages", json={"payload": payload, "priority": "MEDIUM", **extra}
    )
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


async def _take(
    client: Client, qid: str, count: int = 1, consumer: str | None = None, **body: Any
) -> list[dict[str, Any]]:
    headers = {} if consumer is None else {"retsu-consumer": consumer}
    response = await client.post(
        f"/v1/queues/{qid}/messages/dequeue",
        json={"max_messages": count, **body},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


async def _ok(client: Client, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    response = await client.request(method, path, **kwargs)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _ack(client: Client, qid: str, message: dict[str, Any], **extra: Any) -> Any:
    return client.post(
        f"/v1/queues/{qid}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"], **extra},
    )


def _release(client: Client, qid: str, message: dict[str, Any], **extra: Any) -> Any:
    return client.post(
        f"/v1/queues/{qid}/messages/{message['id']}/visibility",
        json={
            "receipt_handle": message["receipt_handle"],
            "visibility_timeout_seconds": 0,
            **extra,
        },
    )


# -- acknowledge result, visibility error, attempts --------------------------------------


async def test_a_completed_message_keeps_its_result_attempts_and_is_browsable(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("kept", completed_retention_seconds=3600)
    qid = queue["id"]
    mid = await _send(client, qid, '{"n": 1}', group="g1")
    first = (await _take(client, qid, consumer="w-1"))[0]
    assert first["group"] == "g1"
    released = await _release(client, qid, first, error="boom: timeout")
    assert released.status_code == 204, released.text
    clock.advance(1)
    second = (await _take(client, qid, consumer="w-2"))[0]
    acked = await _ack(client, qid, second, result='{"ok": true}')
    assert acked.status_code == 204, acked.text

    shown = await _ok(client, "GET", f"/v1/queues/{qid}/messages/{mid}")
    assert shown["state"] == "completed"
    assert shown["result"] == '{"ok": true}'
    assert shown["completed_at"] is not None and shown["completed_at"].endswith("Z")
    assert shown["group"] == "g1"
    attempts = shown["attempts"]
    assert [set(a) for a in attempts] == [ATTEMPT_KEYS, ATTEMPT_KEYS]
    assert [(a["number"], a["consumer"], a["outcome"], a["error"]) for a in attempts] == [
        (1, "w-1", "released", "boom: timeout"),
        (2, "w-2", "acknowledged", None),
    ]
    assert all(a["ended_at"] is not None for a in attempts)

    listed = await _ok(client, "GET", f"/v1/queues/{qid}/messages", params={"state": "completed"})
    assert [m["id"] for m in listed["items"]] == [mid]
    # Completed messages are not live: not in the every-live list.
    every = await _ok(client, "GET", f"/v1/queues/{qid}/messages")
    assert every["items"] == []
    stats = (await _ok(client, "GET", f"/v1/queues/{qid}"))["stats"]
    assert (stats["completed"], stats["ready"], stats["groups"]) == (1, 0, 0)


@pytest.mark.parametrize("max_messages", [None, 5])
async def test_the_dequeue_that_buries_a_lanes_exhausted_head_delivers_its_next(
    client: Client, new_queue: NewQueue, max_messages: int | None
) -> None:
    """SPEC §3.3 and §3.10: an exhausted message never hides a deliverable one — also not
    its lane's next message, which becomes the head when the head is dead-lettered."""
    queue = await new_queue("buried-head", max_delivery_attempts=1)
    qid = queue["id"]
    await _send(client, qid, "n1", group="g")
    await _send(client, qid, "n2", group="g")
    head = (await _take(client, qid))[0]
    assert (await _release(client, qid, head)).status_code == 204
    body = {} if max_messages is None else {"max_messages": max_messages}
    response = await client.post(f"/v1/queues/{qid}/messages/dequeue", json=body)
    assert response.status_code == 200, response.text
    found = response.json() if max_messages is None else response.json()["messages"][0]
    assert (found["payload"], found["delivery_attempts"]) == ("n2", 1)
    dead = await _ok(client, "GET", f"/v1/queues/{qid}/dead-letters")
    assert [d["payload"] for d in dead["items"]] == ["n1"]


async def test_completed_list_is_newest_completion_first(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("newest", completed_retention_seconds=60)
    qid = queue["id"]
    ids = [await _send(client, qid, p) for p in ("a", "b", "c")]
    taken = await _take(client, qid, 3)
    for message in reversed(taken):  # c, b, a completed in that order
        assert (await _ack(client, qid, message)).status_code == 204
        clock.advance(0.01)
    page = await _ok(
        client, "GET", f"/v1/queues/{qid}/messages", params={"state": "completed", "limit": 2}
    )
    assert [m["id"] for m in page["items"]] == [ids[0], ids[1]]
    assert all(m["state"] == "completed" and m["result"] is None for m in page["items"])
    rest = await _ok(
        client,
        "GET",
        f"/v1/queues/{qid}/messages",
        params={"state": "completed", "cursor": page["next_cursor"]},
    )
    assert [m["id"] for m in rest["items"]] == [ids[2]]


async def test_without_retention_the_result_is_dropped_and_the_message_gone(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue("gone")
    qid = queue["id"]
    mid = await _send(client, qid, "x")
    message = (await _take(client, qid))[0]
    assert (await _ack(client, qid, message, result="r")).status_code == 204
    missing = await client.get(f"/v1/queues/{qid}/messages/{mid}")
    assert_problem(missing, 404, "message_not_found")
    assert (await _ok(client, "GET", f"/v1/queues/{qid}"))["stats"]["completed"] == 0


async def test_a_live_message_shows_its_attempt_in_flight(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue("live")
    qid = queue["id"]
    mid = await _send(client, qid, "x")
    await _take(client, qid, consumer="worker-7")
    shown = await _ok(client, "GET", f"/v1/queues/{qid}/messages/{mid}")
    assert shown["state"] == "in_flight"
    assert (shown["completed_at"], shown["result"]) == (None, None)
    [attempt] = shown["attempts"]
    assert (attempt["consumer"], attempt["outcome"], attempt["ended_at"]) == (
        "worker-7",
        "in_flight",
        None,
    )


@pytest.mark.parametrize(
    ("extra", "status", "code"),
    [
        ({"result": "x" * 65537}, 400, "invalid_result"),
        ({"result": "nul\u0000"}, 400, "invalid_result"),
        ({"result": 5}, 400, "invalid_json"),
        ({"result": None}, 204, None),
        ({"result": "x" * 65536}, 204, None),
    ],
)
async def test_acknowledge_result_rules(
    client: Client, new_queue: NewQueue, extra: dict[str, Any], status: int, code: str | None
) -> None:
    queue = await new_queue("ack-rules", completed_retention_seconds=10)
    qid = queue["id"]
    await _send(client, qid, "x")
    message = (await _take(client, qid))[0]
    response = await _ack(client, qid, message, **extra)
    if code is None:
        assert response.status_code == status, response.text
    else:
        assert_problem(response, status, code)


async def test_acknowledge_result_on_a_missing_queue(client: Client) -> None:
    response = await client.post(
        f"/v1/queues/{MISSING_ID}/messages/{MISSING_ID}/acknowledge",
        json={"receipt_handle": "h", "result": "r"},
    )
    assert_problem(response, 404, "queue_not_found")


async def test_batch_acknowledge_takes_no_result(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("batch-ack")
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/acknowledge",
        json={"messages": [{"id": MISSING_ID, "receipt_handle": "h", "result": "r"}]},
    )
    assert_problem(response, 400, "invalid_json")


@pytest.mark.parametrize(
    ("extra", "status", "code"),
    [
        ({"error": "e" * 4097}, 400, "invalid_error"),
        ({"error": "nul\u0000"}, 400, "invalid_error"),
        ({"error": ["x"]}, 400, "invalid_json"),
        ({"error": "e" * 4096}, 204, None),
        ({"error": None}, 204, None),
    ],
)
async def test_visibility_error_rules(
    client: Client, new_queue: NewQueue, extra: dict[str, Any], status: int, code: str | None
) -> None:
    queue = await new_queue("vis-rules")
    qid = queue["id"]
    await _send(client, qid, "x")
    message = (await _take(client, qid))[0]
    response = await _release(client, qid, message, **extra)
    if code is None:
        assert response.status_code == status, response.text
    else:
        assert_problem(response, status, code)


async def test_a_stale_visibility_change_with_an_error_is_a_conflict(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue("stale")
    qid = queue["id"]
    await _send(client, qid, "x")
    message = (await _take(client, qid))[0]
    assert (await _ack(client, qid, message)).status_code == 204
    assert_problem(await _release(client, qid, message, error="late"), 409, "stale_receipt_handle")


# -- dequeue ------------------------------------------------------------------------------


async def test_a_dequeued_message_carries_its_group_or_null(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue("grouped")
    qid = queue["id"]
    await _send(client, qid, "lane", group="tenant-1")
    await _send(client, qid, "plain")
    taken = await _take(client, qid, 2)
    assert [(m["payload"], m["group"]) for m in taken] == [("lane", "tenant-1"), ("plain", None)]
    await _send(client, qid, "single", group="t")
    one = await client.post(f"/v1/queues/{qid}/messages/dequeue")
    assert one.json()["group"] == "t"


# -- dead letters ---------------------------------------------------------------------------


async def _dead_letters(client: Client, clock: ManualClock, qid: str) -> dict[str, str]:
    """Three dead letters (one attempt each): a {"kind": "a"} of group g1, b of g2, text."""
    ids = {
        "a": await _send(client, qid, '{"kind": "a", "n": 1}', group="g1"),
        "b": await _send(client, qid, '{"kind": "b"}', group="g2"),
        "text": await _send(client, qid, "not json"),
    }
    taken = await _take(client, qid, 3, consumer="w", visibility_timeout_seconds=1)
    assert len(taken) == 3
    for message in taken:
        assert (
            await _release(client, qid, message, error=f"failed {message['payload']}")
        ).status_code == 204
    clock.advance(2)
    await client.post(f"/v1/queues/{qid}/messages/dequeue")  # moves them
    return ids


async def test_dead_letters_carry_attempts_and_last_error_and_search(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("dlq", max_delivery_attempts=1)
    qid = queue["id"]
    ids = await _dead_letters(client, clock, qid)
    one = await _ok(client, "GET", f"/v1/queues/{qid}/dead-letters/{ids['a']}")
    assert one["group"] == "g1"
    assert one["last_error"] == 'failed {"kind": "a", "n": 1}'
    [attempt] = one["attempts"]
    assert (attempt["consumer"], attempt["outcome"], attempt["error"]) == (
        "w",
        "released",
        one["last_error"],
    )

    def listed(**params: Any) -> Any:
        return client.get(f"/v1/queues/{qid}/dead-letters", params=params)

    assert [d["id"] for d in (await listed(group="g2")).json()["items"]] == [ids["b"]]
    matched = (await listed(match=json.dumps({"kind": "a"}))).json()["items"]
    assert [d["id"] for d in matched] == [ids["a"]]
    assert (await listed(match="{}")).json()["items"].__len__() == 2  # text never matches
    by_reason = (await listed(reason="MAX_DELIVERY_ATTEMPTS_EXHAUSTED")).json()["items"]
    assert len(by_reason) == 3
    assert_problem(await listed(match="[1]"), 400, "invalid_match")
    assert_problem(await listed(match="{nope"), 400, "invalid_match")
    assert_problem(await listed(group="has space"), 400, "invalid_group")
    assert_problem(await listed(reason="WHATEVER"), 400, "invalid_reason")
    # A cursor is bound to its filter.
    page = (await listed(limit=1)).json()
    assert page["next_cursor"]
    assert_problem(await listed(cursor=page["next_cursor"], group="g1"), 400, "invalid_cursor")


async def test_dead_letter_bulk_delete_and_redrive_with_dry_runs(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("bulk-dlq", max_delivery_attempts=1)
    qid = queue["id"]
    ids = await _dead_letters(client, clock, qid)
    base = f"/v1/queues/{qid}/dead-letters"

    assert await _ok(client, "POST", base + "/delete", json={"dry_run": True}) == {"matched": 3}
    assert await _ok(
        client, "POST", base + "/redrive", json={"dry_run": True, "match": {"kind": "b"}}
    ) == {"matched": 1}
    assert await _ok(client, "POST", base + "/redrive", json={"match": {"kind": "b"}}) == {
        "redriven": 1
    }
    live = await _ok(client, "GET", f"/v1/queues/{qid}/messages")
    assert [(m["payload"], m["group"]) for m in live["items"]] == [('{"kind": "b"}', "g2")]
    assert await _ok(
        client, "POST", base + "/delete", json={"group": "g1", "reason": None, "limit": 5}
    ) == {"deleted": 1}
    left = await _ok(client, "GET", base)
    assert [d["id"] for d in left["items"]] == [ids["text"]]
    assert await _ok(
        client, "POST", base + "/delete", json={"reason": "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"}
    ) == {"deleted": 1}
    assert (await _ok(client, "GET", f"/v1/queues/{qid}"))["stats"]["dead_letters"] == 0

    log = (await _ok(client, "GET", "/v1/audit-log", params={"queue_id": qid}))["items"]
    bulk = [r for r in log if r["target_type"] == "queue" and r["action"] != "queue.created"]
    assert [r["action"] for r in bulk] == [
        "dead_letter.deleted",
        "dead_letter.deleted",
        "dead_letter.redriven",
    ]  # dry runs write nothing
    assert bulk[1]["details"]["filter"] == {"group": "g1"}
    assert bulk[2]["details"]["filter"] == {"match": {"kind": "b"}}
    assert [r["details"].get("deleted", r["details"].get("redriven")) for r in bulk] == [1, 1, 1]


@pytest.mark.parametrize(
    ("tail", "body", "code"),
    [
        ("/redrive", {"limit": 1001}, "invalid_limit"),
        ("/redrive", {"limit": 0}, "invalid_limit"),
        ("/redrive", {"match": [1]}, "invalid_match"),
        ("/redrive", {"match": "{}"}, "invalid_match"),
        ("/redrive", {"reason": "nope"}, "invalid_reason"),
        ("/redrive", {"priority": "URGENT"}, "invalid_priority"),
        ("/redrive", {"group": ""}, "invalid_group"),
        ("/redrive", {"state": "ready"}, "invalid_json"),
        ("/redrive", {"dry_run": "yes"}, "invalid_json"),
        ("/delete", {"limit": 100001}, "invalid_limit"),
        ("/delete", {"match": 1}, "invalid_match"),
        ("/delete", {"match": {"a": "\u0000"}}, "invalid_match"),
        ("/delete", {"match": {"k": "v" * 5000}}, "invalid_match"),
        ("/delete", {"state": "ready"}, "invalid_json"),
        ("/delete", {"limit": "5"}, "invalid_json"),
        ("/delete", {"unknown": 1}, "invalid_json"),
    ],
)
async def test_dead_letter_bulk_errors(
    client: Client, new_queue: NewQueue, tail: str, body: dict[str, Any], code: str
) -> None:
    queue = await new_queue("dl-errors")
    response = await client.post(f"/v1/queues/{queue['id']}/dead-letters{tail}", json=body)
    assert_problem(response, 400, code)


async def test_bulk_routes_of_a_missing_queue(client: Client) -> None:
    base = f"/v1/queues/{MISSING_ID}"
    for tail in ("/dead-letters/delete", "/dead-letters/redrive", "/messages/delete"):
        for body in ({}, {"dry_run": True}):
            response = await client.post(base + tail, json=body)
            assert_problem(response, 404, "queue_not_found")
    assert_problem(await client.get(base + "/groups"), 404, "queue_not_found")


async def test_redrive_still_answers_its_old_shape(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("old-shape", max_delivery_attempts=1)
    qid = queue["id"]
    await _dead_letters(client, clock, qid)
    response = await client.post(f"/v1/queues/{qid}/dead-letters/redrive")
    assert (response.status_code, response.json()) == (200, {"redriven": 3})


# -- browsing: group and match, bulk delete -----------------------------------------------


async def test_browse_by_group_and_match(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("search")
    qid = queue["id"]
    a1 = await _send(client, qid, '{"tenant": "a", "tags": ["x", "y"]}', group="a")
    await _send(client, qid, '{"tenant": "b"}', group="b")
    a2 = await _send(client, qid, '{"tenant": "a"}', group="a")
    await _send(client, qid, "plain text", group="a")

    def listed(**params: Any) -> Any:
        return client.get(f"/v1/queues/{qid}/messages", params=params)

    found = (await listed(group="a", match='{"tenant": "a"}')).json()["items"]
    assert [m["id"] for m in found] == [a1, a2]
    tags = (await listed(match=json.dumps({"tags": ["y"]}))).json()["items"]
    assert [m["id"] for m in tags] == [a1]
    ready_a = (await listed(group="a", state="ready")).json()["items"]
    assert len(ready_a) == 3 and all(m["group"] == "a" for m in ready_a)
    for bad in ("[1]", '"text"', "{", "", '{"a": NaN}', "{" + '"k":1,' * 2000 + '"k":1}'):
        assert_problem(await listed(match=bad), 400, "invalid_match")
    for bad_group in ("", "with space", "é", "g" * 129):
        assert_problem(await listed(group=bad_group), 400, "invalid_group")
    page = (await listed(group="a", limit=1)).json()
    assert_problem(await listed(group="b", cursor=page["next_cursor"]), 400, "invalid_cursor")
    rest = (await listed(group="a", limit=1, cursor=page["next_cursor"])).json()
    assert rest["items"][0]["id"] != page["items"][0]["id"]


async def test_bulk_delete_messages(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("bulk", completed_retention_seconds=100)
    qid = queue["id"]
    base = f"/v1/queues/{qid}/messages/delete"
    for n in range(4):
        await _send(client, qid, json.dumps({"n": n, "even": n % 2 == 0}), group=f"g{n % 2}")
    await _send(client, qid, "later", delay_seconds=60)
    done = await _send(client, qid, '{"done": true}')

    assert await _ok(client, "POST", base, json={"dry_run": True}) == {"matched": 6}
    assert await _ok(client, "POST", base, json={"dry_run": True, "state": "delayed"}) == {
        "matched": 1
    }
    assert await _ok(
        client, "POST", base, json={"dry_run": True, "match": {"even": True}, "limit": 1}
    ) == {"matched": 1}
    # Complete the last one: completed messages are deleted only by state=completed.
    taken = await client.post(f"/v1/queues/{qid}/messages/dequeue", json={"max_messages": 10})
    for message in taken.json()["messages"]:
        if message["id"] == done:
            assert (await _ack(client, qid, message, result="ok")).status_code == 204
        else:
            assert (await _release(client, qid, message)).status_code == 204
    clock.advance(0.01)
    assert await _ok(client, "POST", base, json={"state": "completed", "dry_run": True}) == {
        "matched": 1
    }
    assert await _ok(client, "POST", base, json={"match": {"even": True}, "group": "g0"}) == {
        "deleted": 2
    }
    assert await _ok(client, "POST", base, json={"state": "completed"}) == {"deleted": 1}
    assert_problem(await client.get(f"/v1/queues/{qid}/messages/{done}"), 404, "message_not_found")
    stats = (await _ok(client, "GET", f"/v1/queues/{qid}"))["stats"]
    assert (stats["ready"], stats["delayed"], stats["completed"], stats["groups"]) == (2, 1, 0, 1)
    # No body: every live message, up to the default limit.
    assert (await client.post(base)).json() == {"deleted": 3}

    log = (await _ok(client, "GET", "/v1/audit-log", params={"queue_id": qid}))["items"]
    deletes = [r for r in log if r["action"] == "message.deleted"]
    assert [r["details"]["deleted"] for r in deletes] == [3, 1, 2]
    assert deletes[2]["details"]["filter"] == {"group": "g0", "match": {"even": True}}
    assert deletes[1]["details"]["filter"] == {"state": "completed"}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"state": "dead"}, "invalid_state"),
        ({"priority": "low"}, "invalid_priority"),
        ({"group": "a b"}, "invalid_group"),
        ({"match": "{}"}, "invalid_match"),
        ({"match": [{"a": 1}]}, "invalid_match"),
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 100001}, "invalid_limit"),
        ({"limit": 1.5}, "invalid_json"),
        ({"reason": "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"}, "invalid_json"),
        ({"dry_run": 1}, "invalid_json"),
    ],
)
async def test_bulk_delete_messages_errors(
    client: Client, new_queue: NewQueue, body: dict[str, Any], code: str
) -> None:
    queue = await new_queue("bulk-errors")
    response = await client.post(f"/v1/queues/{queue['id']}/messages/delete", json=body)
    assert_problem(response, 400, code)


async def test_bulk_delete_needs_json(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("bulk-json")
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/delete",
        content=b"dry_run=true",
        headers={"content-type": "text/plain"},
    )
    assert_problem(response, 415, "unsupported_media_type")


# -- groups -----------------------------------------------------------------------------------


async def test_groups_list_states_order_and_pages(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("lanes")
    qid = queue["id"]
    a_head = await _send(client, qid, "a1", group="a")
    clock.advance(0.01)
    await _send(client, qid, "a2", group="a")
    clock.advance(0.01)
    b_head = await _send(client, qid, "b1", group="b", delay_seconds=30)
    clock.advance(0.01)
    c_head = await _send(client, qid, "c1", group="c")
    clock.advance(0.01)
    await _send(client, qid, "ungrouped")

    taken = await _take(client, qid, 1)
    assert taken[0]["id"] == a_head  # group a's head is now leased: a is blocked

    everything = await _ok(client, "GET", f"/v1/queues/{qid}/groups")
    items = everything["items"]
    assert everything["next_cursor"] is None
    assert all(set(g) == GROUP_KEYS for g in items)
    by_name = {g["group"]: g for g in items}
    assert set(by_name) == {"a", "b", "c"}
    a, b, c = by_name["a"], by_name["b"], by_name["c"]
    assert (a["state"], a["in_flight"], a["ready"], a["head_id"]) == ("blocked", 1, 1, a_head)
    assert a["head_delivery_attempts"] == 1 and a["last_delivered_at"] is not None
    assert (b["state"], b["delayed"], b["head_id"]) == ("waiting", 1, b_head)
    assert (c["state"], c["ready"], c["head_id"], c["last_delivered_at"]) == (
        "ready",
        1,
        c_head,
        None,
    )
    assert c["head_enqueued_at"].endswith("Z")

    for state, names in (("ready", ["c"]), ("blocked", ["a"]), ("waiting", ["b"])):
        page = await _ok(client, "GET", f"/v1/queues/{qid}/groups", params={"state": state})
        assert [g["group"] for g in page["items"]] == names

    first = await _ok(client, "GET", f"/v1/queues/{qid}/groups", params={"limit": 2})
    assert len(first["items"]) == 2 and first["next_cursor"]
    second = await _ok(
        client,
        "GET",
        f"/v1/queues/{qid}/groups",
        params={"limit": 2, "cursor": first["next_cursor"]},
    )
    assert second["next_cursor"] is None
    assert [g["group"] for g in first["items"] + second["items"]] == [g["group"] for g in items]
    stats = (await _ok(client, "GET", f"/v1/queues/{qid}"))["stats"]
    assert stats["groups"] == 3


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"state": "delayed"}, "invalid_state"),
        ({"state": ""}, "invalid_state"),
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 101}, "invalid_limit"),
        ({"limit": "x"}, "invalid_limit"),
        ({"cursor": "garbage"}, "invalid_cursor"),
    ],
)
async def test_groups_list_errors(
    client: Client, new_queue: NewQueue, params: dict[str, Any], code: str
) -> None:
    queue = await new_queue("lanes-errors")
    response = await client.get(f"/v1/queues/{queue['id']}/groups", params=params)
    assert_problem(response, 400, code)


async def test_groups_cursor_is_bound_to_its_state(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("lanes-cursor")
    qid = queue["id"]
    for group in ("a", "b"):
        await _send(client, qid, group, group=group)
    page = await _ok(client, "GET", f"/v1/queues/{qid}/groups", params={"limit": 1})
    response = await client.get(
        f"/v1/queues/{qid}/groups", params={"state": "ready", "cursor": page["next_cursor"]}
    )
    assert_problem(response, 400, "invalid_cursor")


# -- the throttling metric ------------------------------------------------------------------


async def test_throttled_deliveries_are_counted_by_reason(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue(
        "capped", max_in_flight=1, group_rate_limit={"per_second": 0.01, "burst": 1}
    )
    qid = queue["id"]
    for payload in ("1", "2"):
        await _send(client, qid, payload)
    assert len(await _take(client, qid, 2)) == 1  # the cap of one lease cut it short
    text = (await client.get("/metrics")).text
    assert (
        'queue_deliveries_throttled_total{queue_name="capped",reason="max_in_flight"} 1.0' in text
    )

    other = await new_queue(
        "bucket", group_max_in_flight=10, group_rate_limit={"per_second": 0.01, "burst": 1}
    )
    for payload in ("1", "2"):
        await _send(client, other["id"], payload, group="g")
    assert len(await _take(client, other["id"], 2)) == 1
    text = (await client.get("/metrics")).text
    assert (
        'queue_deliveries_throttled_total{queue_name="bucket",reason="group_rate_limit"} 1.0'
        in text
    )
