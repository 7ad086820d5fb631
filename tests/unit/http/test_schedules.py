"""Schedule routes (SPEC §3.12) over the memory app, and what the scheduler makes of them."""

from __future__ import annotations

from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.scheduler import Scheduler
from tests.support.doubles.sleeper import FakeSleeper
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

NIGHTLY = {
    "name": "nightly",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "message": {"payload": '{"report":"daily"}', "priority": "HIGH", "ttl_seconds": 3600},
}
SHAPE = {
    "id",
    "queue_id",
    "name",
    "cron",
    "every_seconds",
    "timezone",
    "message",
    "paused",
    "next_run_at",
    "last_run_at",
    "created_at",
}


@pytest.fixture
async def queue(new_queue: NewQueue) -> dict[str, Any]:
    return await new_queue("reports")


def path(queue: dict[str, Any], tail: str = "") -> str:
    return f"/v1/queues/{queue['id']}/schedules{tail}"


async def create(client: Client, queue: dict[str, Any], **body: Any) -> dict[str, Any]:
    response = await client.post(path(queue), json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def run_scheduler(storage: MemoryStorage, metrics: Metrics) -> Scheduler:
    """One scheduler pass: every due time runs, then it would sleep (and stops)."""
    sleeper = FakeSleeper(stop_after=1)
    scheduler = Scheduler(storage, metrics, metrics, sleeper)
    await scheduler.run()
    return scheduler


async def test_a_cron_schedule_is_created_in_its_time_zone(
    client: Client, queue: dict[str, Any], clock: ManualClock
) -> None:
    clock.set(clock.now().replace(month=3, day=28, hour=12))  # 2026-03-28, the day before DST
    made = await create(client, queue, **NIGHTLY)
    assert set(made) == SHAPE
    assert made["queue_id"] == queue["id"] and made["name"] == "nightly"
    assert (made["cron"], made["every_seconds"], made["timezone"]) == (
        "30 2 * * *",
        None,
        "Europe/Berlin",
    )
    assert made["message"] == {
        "payload": '{"report":"daily"}',
        "priority": "HIGH",
        "ttl_seconds": 3600,
        "group": None,
    }
    assert made["paused"] is False and made["last_run_at"] is None
    assert made["next_run_at"] == "2026-03-29T01:00:00Z"  # 02:30 does not exist: 03:00 CEST
    assert made["created_at"] == "2026-03-28T12:00:00Z"
    again = await client.get(path(queue, f"/{made['id']}"))
    assert again.status_code == 200 and again.json() == made


async def test_an_interval_schedule_defaults_to_utc_and_is_due_one_interval_later(
    client: Client, queue: dict[str, Any]
) -> None:
    made = await create(
        client,
        queue,
        name="tick",
        every_seconds=90,
        message={"payload": "t", "priority": "LOW", "group": "lane"},
    )
    assert (made["cron"], made["every_seconds"], made["timezone"]) == (None, 90, "UTC")
    assert made["created_at"] == "2026-01-01T00:00:00Z"
    assert made["next_run_at"] == "2026-01-01T00:01:30Z"
    assert made["message"]["group"] == "lane" and made["message"]["ttl_seconds"] is None
    paused = await create(
        client,
        queue,
        name="later",
        every_seconds=5,
        paused=True,
        timezone=None,
        message={"payload": "t", "priority": "LOW", "ttl_seconds": None},
    )
    assert paused["paused"] is True and paused["next_run_at"] is None


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"name": "Bad Name"}, "invalid_schedule_name"),
        ({"name": "x" * 65}, "invalid_schedule_name"),
        ({"cron": None}, "invalid_cron"),
        ({"every_seconds": 60}, "invalid_cron"),
        ({"cron": "* * *"}, "invalid_cron"),
        ({"cron": "0 25 * * *"}, "invalid_cron"),
        ({"cron": None, "every_seconds": 0}, "invalid_every_seconds"),
        ({"cron": None, "every_seconds": 2_592_001}, "invalid_every_seconds"),
        ({"timezone": "Europe/Atlantis"}, "invalid_timezone"),
        ({"timezone": ""}, "invalid_timezone"),
        ({"message": {"payload": "x", "priority": "URGENT"}}, "invalid_priority"),
        ({"message": {"payload": "x", "priority": "LOW", "ttl_seconds": 0}}, "invalid_ttl"),
        ({"message": {"payload": "x", "priority": "LOW", "group": ""}}, "invalid_group"),
        ({"message": {"payload": "\u0000", "priority": "LOW"}}, "invalid_payload"),
        ({"message": {"payload": "x", "priority": "LOW", "delay_seconds": 5}}, "invalid_json"),
        ({"message": None}, "invalid_json"),
        ({"every_seconds": "60", "cron": None}, "invalid_json"),
        ({"every_seconds": True, "cron": None}, "invalid_json"),
        ({"paused": "no"}, "invalid_json"),
        ({"surprise": 1}, "invalid_json"),
    ],
)
async def test_bad_definitions_answer_their_codes(
    client: Client, queue: dict[str, Any], change: dict[str, Any], code: str
) -> None:
    assert_problem(await client.post(path(queue), json={**NIGHTLY, **change}), 400, code)


async def test_names_are_unique_per_queue_and_queues_must_exist(
    client: Client, queue: dict[str, Any], new_queue: NewQueue
) -> None:
    await create(client, queue, **NIGHTLY)
    assert_problem(await client.post(path(queue), json=NIGHTLY), 409, "schedule_already_exists")
    other = await new_queue("other")
    await create(client, other, **NIGHTLY)
    missing = {"id": MISSING_ID}
    assert_problem(await client.post(path(missing), json=NIGHTLY), 404, "queue_not_found")
    assert_problem(await client.get(path(missing)), 404, "queue_not_found")
    assert_problem(await client.get(path(missing, f"/{MISSING_ID}")), 404, "queue_not_found")
    assert_problem(await client.get(path(queue, f"/{MISSING_ID}")), 404, "schedule_not_found")
    assert_problem(await client.get(path(queue, "/not-a-uuid")), 400, "invalid_path")
    for action in ("pause", "resume"):
        response = await client.post(path(queue, f"/{MISSING_ID}/{action}"))
        assert_problem(response, 404, "schedule_not_found")
    assert_problem(await client.delete(path(queue, f"/{MISSING_ID}")), 404, "schedule_not_found")
    response = await client.patch(path(queue, f"/{MISSING_ID}"), json={"name": "n"})
    assert_problem(response, 404, "schedule_not_found")


async def test_schedules_are_listed_by_name_with_a_cursor(
    client: Client, queue: dict[str, Any]
) -> None:
    for name in ("c", "a", "b-2", "b"):
        await create(client, queue, **{**NIGHTLY, "name": name})
    first = await client.get(path(queue), params={"limit": 3})
    assert first.status_code == 200
    page = first.json()
    assert [s["name"] for s in page["items"]] == ["a", "b", "b-2"]
    rest = (
        await client.get(path(queue), params={"limit": 3, "cursor": page["next_cursor"]})
    ).json()
    assert [s["name"] for s in rest["items"]] == ["c"] and rest["next_cursor"] is None
    assert_problem(
        await client.get(path(queue), params={"cursor": page["next_cursor"][:-2]}),
        400,
        "invalid_cursor",
    )
    assert_problem(await client.get(path(queue), params={"limit": 0}), 400, "invalid_limit")


async def test_patch_changes_what_it_is_given(
    client: Client, queue: dict[str, Any], clock: ManualClock
) -> None:
    made = await create(client, queue, **NIGHTLY)
    one = path(queue, f"/{made['id']}")
    renamed = await client.patch(one, json={"name": "overnight", "cron": None})
    assert renamed.status_code == 200
    assert renamed.json() == {**made, "name": "overnight"}
    clock.advance(7)
    every = (await client.patch(one, json={"every_seconds": 60})).json()
    assert (every["cron"], every["every_seconds"], every["timezone"]) == (None, 60, "Europe/Berlin")
    assert every["next_run_at"] == "2026-01-01T00:01:07Z"  # afresh from the change
    message = {"payload": "new", "priority": "LOW", "group": "g"}
    kept = (await client.patch(one, json={"message": message})).json()
    assert kept["message"] == {**message, "ttl_seconds": None}
    assert kept["next_run_at"] == every["next_run_at"]
    assert_problem(await client.patch(one, json={}), 400, "empty_schedule_update")
    assert_problem(
        await client.patch(one, json={"cron": "* * * * *", "every_seconds": 5}), 400, "invalid_cron"
    )
    assert_problem(await client.patch(one, json={"paused": True}), 400, "invalid_json")
    await create(client, queue, **{**NIGHTLY, "name": "taken"})
    assert_problem(await client.patch(one, json={"name": "taken"}), 409, "schedule_already_exists")


async def test_pause_resume_and_delete_answer_the_schedule_and_are_audited(
    client: Client, queue: dict[str, Any], clock: ManualClock
) -> None:
    made = await create(
        client, queue, name="tick", every_seconds=30, message={"payload": "t", "priority": "LOW"}
    )
    one = path(queue, f"/{made['id']}")
    paused = await client.post(one + "/pause")
    assert paused.status_code == 200
    assert paused.json()["paused"] is True and paused.json()["next_run_at"] is None
    clock.advance(100)
    resumed = (await client.post(one + "/resume")).json()
    assert resumed["paused"] is False
    assert resumed["next_run_at"] == "2026-01-01T00:02:10Z"  # one interval after the resume
    deleted = await client.delete(one)
    assert deleted.status_code == 204 and deleted.content == b""
    assert_problem(await client.get(one), 404, "schedule_not_found")
    audit = (await client.get("/v1/audit-log", params={"queue_id": queue["id"]})).json()["items"]
    rows = [r for r in audit if r["target_type"] == "schedule"]
    assert [r["action"] for r in rows] == [
        "schedule.deleted",
        "schedule.resumed",
        "schedule.paused",
        "schedule.created",
    ]
    assert {r["target_id"] for r in rows} == {made["id"]}
    assert rows[-1]["details"]["every_seconds"] == 30 and rows[-1]["actor"] == "anonymous"
    by_action = await client.get("/v1/audit-log", params={"action": "schedule.created"})
    assert [r["target_id"] for r in by_action.json()["items"]] == [made["id"]]


async def test_the_scheduler_enqueues_each_due_time_with_its_schedule_id(
    client: Client,
    queue: dict[str, Any],
    clock: ManualClock,
    repository: MemoryStorage,
    metrics: Metrics,
) -> None:
    await client.post(f"/v1/queues/{queue['id']}/pause")  # a paused queue still gets them
    made = await create(
        client,
        queue,
        name="tick",
        every_seconds=60,
        message={"payload": "p", "priority": "HIGH", "group": "g"},
    )
    clock.advance(60)
    await run_scheduler(repository, metrics)
    clock.advance(60 * 5 + 1)  # five more due times: one runs (late), four are skipped
    await run_scheduler(repository, metrics)
    items = (await client.get(f"/v1/queues/{queue['id']}/messages")).json()["items"]
    assert [(m["schedule_id"], m["group"], m["payload"]) for m in items] == [
        (made["id"], "g", "p")
    ] * 2
    schedule = (await client.get(path(queue, f"/{made['id']}"))).json()
    assert schedule["last_run_at"] == "2026-01-01T00:06:01Z"
    assert schedule["next_run_at"] == "2026-01-01T00:07:00Z"
    text = metrics.render()[0].decode()
    assert 'queue_schedule_runs_total{outcome="enqueued",queue_name="reports"} 2.0' in text
    assert 'queue_schedule_runs_total{outcome="missed",queue_name="reports"} 4.0' in text
    assert 'queue_schedule_lag_seconds_count{queue_name="reports"} 2.0' in text
    assert 'queue_messages_enqueued_total{message_priority="HIGH",queue_name="reports"} 2.0' in text
