"""The console's schedules (SPEC §3.9, §3.12) over the in-memory app: the list with next
and last runs, create (with each field's error), pause, resume, delete after a
confirmation page; every action checked through the JSON API and the audit log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from dependency_injector import providers
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.http.auth import AuthConfig
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.scheduler import Scheduler
from retsu.entrypoints.containers import ApiContainer
from tests.support.doubles.sleeper import FakeSleeper
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue
from tests.unit.http.test_console import (
    AS_ADMIN,
    READ_SECRET,
    SERVER_SECRET,
    TOKENS,
    audit,
    csrf_of,
    sign_in,
    submit,
)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    """As a browser sees it: each redirect is an answer of its own."""
    async with AsyncTestClient(app=app) as test_client:
        test_client.follow_redirects = False
        yield test_client


@pytest.fixture
async def auth_client(container: ApiContainer) -> AsyncIterator[Client]:
    container.auth.override(providers.Object(AuthConfig(enabled=True, tokens=TOKENS)))
    container.storage.secrets.override(providers.Object(RandomServerSecrets(SERVER_SECRET)))
    async with AsyncTestClient(app=container.app()) as test_client:
        test_client.follow_redirects = False
        yield test_client


CRON_FORM = {
    "name": "nightly",
    "kind": "cron",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "every_seconds": "",
    "payload": '{"report": "daily"}',
    "priority": "HIGH",
    "ttl_seconds": "",
    "group": "",
}


async def schedules_of(client: Client, queue: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/queues/{queue}/schedules")
    assert response.status_code == 200
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_a_schedule_is_created_listed_paused_resumed_and_deleted(
    client: Client,
    new_queue: NewQueue,
    clock: ManualClock,
    repository: MemoryStorage,
) -> None:
    queue = (await new_queue("reports"))["id"]
    page = f"/console/queues/{queue}/schedules"
    empty = await client.get(page)
    assert empty.status_code == 200 and "No schedules" in empty.text
    assert 'aria-current="page">Schedules' in empty.text  # its tab

    created = await submit(client, page, CRON_FORM, page=page)
    assert created.status_code == 303 and created.headers["location"] == page + "?notice=created"
    every = {**CRON_FORM, "name": "tick", "kind": "every", "every_seconds": "60", "group": "g"}
    assert (await submit(client, page, every, page=page)).status_code == 303
    [nightly, tick] = await schedules_of(client, queue)
    assert (nightly["cron"], nightly["timezone"], nightly["message"]["priority"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        "HIGH",
    )
    assert (tick["every_seconds"], tick["cron"], tick["message"]["group"]) == (60, None, "g")

    # The scheduler runs the tick once: its last run shows.
    clock.advance(60)
    metrics = Metrics()
    await Scheduler(repository, metrics, metrics, FakeSleeper(stop_after=1)).run()
    listed = await client.get(page + "?notice=created")
    assert "Schedule created." in listed.text
    row = listed.text.split('data-schedule="tick"')[1].split("</tr>")[0]
    assert "2026-01-01 00:01:00" in row.split("data-last-run")[1]  # last run
    assert "2026-01-01 00:02:00" in row.split("data-next-run")[1].split("data-last-run")[0]
    assert "every 1 min" in row and "group g" in row

    paused = await submit(client, f"{page}/{tick['id']}/pause", page=page)
    assert paused.status_code == 303 and paused.headers["location"] == page + "?notice=paused"
    assert (await schedules_of(client, queue))[1]["paused"] is True
    shown = (await client.get(page)).text
    assert f"{page}/{tick['id']}/resume" in shown and f"{page}/{tick['id']}/pause" not in shown
    resumed = await submit(client, f"{page}/{tick['id']}/resume", page=page)
    assert resumed.headers["location"] == page + "?notice=resumed"
    assert (await schedules_of(client, queue))[1]["paused"] is False

    # Delete asks first, on a page of its own.
    confirm = await client.get(f"{page}/{tick['id']}/delete")
    assert confirm.status_code == 200
    assert "Delete schedule <code>tick</code>?" in confirm.text
    assert "The messages it already enqueued stay" in confirm.text
    deleted = await submit(
        client, f"{page}/{tick['id']}/delete", page=f"{page}/{tick['id']}/delete"
    )
    assert deleted.status_code == 303 and deleted.headers["location"] == page + "?notice=deleted"
    assert [s["name"] for s in await schedules_of(client, queue)] == ["nightly"]
    for action in ("schedule.created", "schedule.paused", "schedule.resumed", "schedule.deleted"):
        assert await audit(client, action), action
    # The message it enqueued stays, with its schedule.
    [message] = (await client.get(f"/v1/queues/{queue}/messages")).json()["items"]
    assert message["schedule_id"] == tick["id"]


async def test_a_bad_form_shows_the_fields_error_and_keeps_what_was_typed(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("reports"))["id"]
    page = f"/console/queues/{queue}/schedules"
    for change, field, message in (
        ({"name": "Bad Name"}, "name", "name must be"),
        ({"cron": "61 * * * *"}, "cron", "cron"),
        ({"cron": "* * *"}, "cron", "five fields"),
        ({"timezone": "Mars/Base"}, "timezone", "IANA"),
        ({"kind": "every", "every_seconds": "0"}, "every_seconds", "every_seconds must be"),
        ({"kind": "every", "every_seconds": "soon"}, "every_seconds", "whole number"),
        ({"ttl_seconds": "-1"}, "ttl_seconds", "whole number"),
        ({"priority": "URGENT"}, "priority", "priority must be"),
        ({"group": "a b"}, "group", "group must be"),
    ):
        response = await submit(client, page, {**CRON_FORM, **change}, page=page)
        assert response.status_code == 400, change
        error = response.text.split(f'id="s-{field}-error">')[1].split("</div>")[0]
        assert message in error, (change, error)
        assert "{&#34;report&#34;: &#34;daily&#34;}" in response.text  # the payload kept
    assert await schedules_of(client, queue) == []
    await submit(client, page, CRON_FORM, page=page)
    taken = await submit(client, page, CRON_FORM, page=page)
    assert taken.status_code == 400
    assert "already has a schedule named" in taken.text.split('id="s-name-error">')[1]


async def test_unknown_schedules_and_queues_are_not_found_pages(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("reports"))["id"]
    assert (await client.get(f"/console/queues/{MISSING_ID}/schedules")).status_code == 404
    gone = await client.get(f"/console/queues/{queue}/schedules/{MISSING_ID}/delete")
    assert gone.status_code == 404
    page = f"/console/queues/{queue}/schedules"
    response = await submit(client, f"{page}/{MISSING_ID}/pause", page=page)
    assert response.status_code == 404


async def test_a_read_session_sees_schedules_and_changes_none(auth_client: Client) -> None:
    client = auth_client
    queue = (await client.post("/v1/queues", json={"name": "q"}, headers=AS_ADMIN)).json()["id"]
    body = {"name": "tick", "every_seconds": 5, "message": {"payload": "p", "priority": "LOW"}}
    made = await client.post(f"/v1/queues/{queue}/schedules", json=body, headers=AS_ADMIN)
    schedule = made.json()["id"]
    await sign_in(client, READ_SECRET)
    page = await client.get(f"/console/queues/{queue}/schedules")
    assert page.status_code == 200 and "tick" in page.text
    assert 'disabled aria-disabled="true"' in page.text
    token = csrf_of(page)
    for path, data in (
        (f"/console/queues/{queue}/schedules", {**CRON_FORM}),
        (f"/console/queues/{queue}/schedules/{schedule}/pause", {}),
        (f"/console/queues/{queue}/schedules/{schedule}/delete", {}),
    ):
        response = await client.post(path, data={"csrf_token": token, **data})
        assert response.status_code == 403, path
    listed = (await client.get(f"/v1/queues/{queue}/schedules", headers=AS_ADMIN)).json()
    assert [(s["name"], s["paused"]) for s in listed["items"]] == [("tick", False)]
