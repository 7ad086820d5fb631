"""What happened to a message, groups, search, bulk actions, flow-control settings and the
queue's own lifecycle, in headless Chromium against a real `retsu api` (SPEC §3.9–§3.11):
every form used with JavaScript off, every result checked through the JSON API and the
audit log, every page screenshotted into docs/console/screenshots/.

A consumer's side of a message's story (a named dequeue, a release with an error, an
acknowledge with a result) is played against the same database: dequeues through the API
(``Retsu-Consumer``), releases and acknowledges through the PostgreSQL storage functions
the API's routes call (``retsu_change_visibility``, ``retsu_acknowledge``), which record
the error and keep the result. The browser modules share one database: the queue names
here are this module's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from retsu.adapters.postgres.engine import create_engine
from retsu.domain.message import Receipt
from tests.browser.conftest import ConsoleServer, screenshot, start_server
from tests.support.browser import click_and_wait
from tests.support.postgres import PostgresStorage

pytestmark = pytest.mark.integration

Driver = webdriver.Chrome


@pytest.fixture(scope="module")
def server(
    console_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleServer]:
    started = start_server(console_database, Path(tmp_path_factory.mktemp("console-flow")))
    try:
        yield started
    finally:
        assert started.process.stop() == 0, started.process.output()


@pytest.fixture(scope="module")
async def storage(console_database: str) -> AsyncIterator[PostgresStorage]:
    engine = create_engine(console_database, max_connections=2)
    try:
        yield PostgresStorage(engine)
    finally:
        await engine.dispose()


@pytest.fixture
def page(browser: Driver, server: ConsoleServer) -> Iterator[Driver]:
    browser.get(server.url("/console/static/console.css"))
    browser.delete_all_cookies()
    # Forms with JavaScript off: the console works without it (live refresh aside).
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    yield browser
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


@dataclass
class Consumer:
    """A consumer of the real server: dequeues over HTTP, gives back or acknowledges
    through the storage functions the routes call."""

    api: httpx.AsyncClient
    storage: PostgresStorage

    async def take(self, queue: str, name: str) -> Receipt:
        response = await self.api.post(
            f"/v1/queues/{queue}/messages/dequeue", headers={"retsu-consumer": name}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        return Receipt(UUID(body["id"]), body["receipt_handle"])

    async def fail(self, queue: str, receipt: Receipt, error: str) -> None:
        changed = await self.storage.messages.change_visibility(
            UUID(queue), receipt, 0, error=error
        )
        assert changed

    async def finish(self, queue: str, receipt: Receipt, result: str) -> None:
        done = await self.storage.messages.acknowledge(
            UUID(queue), [Receipt(receipt.message_id, receipt.receipt_handle, result)]
        )
        assert done.removed == 1


async def _create(api: httpx.AsyncClient, name: str, **settings: Any) -> str:
    response = await api.post("/v1/queues", json={"name": name, **settings})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _enqueue(api: httpx.AsyncClient, queue: str, payload: Any, **more: Any) -> str:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    body = {"payload": text, "priority": more.pop("priority", "MEDIUM"), **more}
    response = await api.post(f"/v1/queues/{queue}/messages", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _queue(server: ConsoleServer, queue: str) -> dict[str, Any]:
    async with server.api() as api:
        response = await api.get(f"/v1/queues/{queue}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


async def _audit(server: ConsoleServer, queue: str, action: str) -> list[dict[str, Any]]:
    async with server.api() as api:
        response = await api.get("/v1/audit-log", params={"queue_id": queue, "action": action})
        items: list[dict[str, Any]] = response.json()["items"]
        return items


def _type(driver: Driver, field: str, text: str) -> None:
    element = driver.find_element(By.ID, field)
    element.clear()
    if text:
        element.send_keys(text)


def _notice(driver: Driver) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, ".notice")
    assert found, driver.page_source[:3000]
    return found[0].text


def _error(driver: Driver, field: str) -> tuple[str, str]:
    element = driver.find_element(By.ID, f"{field}-error")
    return str(element.get_attribute("data-code")), element.text


def _count(driver: Driver) -> int:
    return int(driver.find_element(By.CSS_SELECTOR, "[data-confirm-count]").text.replace(",", ""))


def _row_ids(driver: Driver) -> list[str]:
    links = driver.find_elements(By.CSS_SELECTOR, "tbody td:first-child a")
    return [str(a.get_attribute("href")).rsplit("/", 1)[1].split("?")[0] for a in links]


async def test_settings_with_flow_control_and_history(page: Driver, server: ConsoleServer) -> None:
    async with server.api() as api:
        queue = await _create(api, "settings-flow")
    page.get(server.url(f"/console/queues/{queue}"))
    # Wrong values in three sections: each error next to its field, nothing saved.
    _type(page, "group_max_in_flight", "0")
    _type(page, "max_in_flight", "lots")
    _type(page, "rate_limit_per_second", "0.001")
    _type(page, "group_rate_limit_burst", "5")
    _type(page, "completed_retention_seconds", "9999999")
    click_and_wait(page, '#settings button[type="submit"]')
    assert _error(page, "group_max_in_flight") == (
        "invalid_group_max_in_flight",
        "group_max_in_flight must be between 1 and 10000, got 0.",
    )
    assert _error(page, "max_in_flight")[0] == "invalid_max_in_flight"
    assert _error(page, "rate_limit_per_second") == (
        "invalid_rate_limit",
        "per_second must be a number from 0.01 to 100000.",
    )
    assert _error(page, "group_rate_limit_per_second")[0] == "invalid_rate_limit"
    assert _error(page, "completed_retention_seconds")[0] == "invalid_completed_retention"
    assert page.find_element(By.ID, "max_in_flight").get_attribute("value") == "lots"
    screenshot(page, "queue-settings-flow-error")
    assert await _audit(server, queue, "queue.updated") == []

    _type(page, "group_max_in_flight", "2")
    _type(page, "max_in_flight", "100")
    _type(page, "rate_limit_per_second", "50")
    _type(page, "rate_limit_burst", "")
    _type(page, "group_rate_limit_per_second", "0.5")
    _type(page, "group_rate_limit_burst", "")
    _type(page, "completed_retention_seconds", "86400")
    click_and_wait(page, '#settings button[type="submit"]')
    assert _notice(page) == "Settings saved."
    found = await _queue(server, queue)
    assert (found["group_max_in_flight"], found["max_in_flight"]) == (2, 100)
    assert found["rate_limit"] == {"per_second": 50, "burst": 50}
    assert found["group_rate_limit"] == {"per_second": 0.5, "burst": 1}
    assert found["completed_retention_seconds"] == 86400
    assert page.find_element(By.ID, "group_rate_limit_per_second").get_attribute("value") == "0.5"
    screenshot(page, "queue-settings-flow")

    # Emptied, a limit is removed (the API's null).
    _type(page, "max_in_flight", "")
    _type(page, "rate_limit_per_second", "")
    _type(page, "rate_limit_burst", "")
    click_and_wait(page, '#settings button[type="submit"]')
    assert _notice(page) == "Settings saved."
    found = await _queue(server, queue)
    assert found["max_in_flight"] is None and found["rate_limit"] is None
    changes = [e["details"]["changes"] for e in await _audit(server, queue, "queue.updated")]
    assert changes[0] == {"max_in_flight": None, "rate_limit": None}
    assert changes[1]["rate_limit"] == {"per_second": 50.0, "burst": 50}


async def test_the_groups_tab_shows_lanes_and_a_stuck_head(
    page: Driver, server: ConsoleServer, storage: PostgresStorage
) -> None:
    async with server.api() as api:
        queue = await _create(api, "lanes", max_delivery_attempts=5)
        consumer = Consumer(api, storage)
        for n in range(4):
            await _enqueue(api, queue, {"tenant": "acme", "step": n}, group="tenant-acme")
        # Its head fails twice and is out a third time: the lane waits behind it.
        for attempt in range(3):
            receipt = await consumer.take(queue, f"worker-{attempt + 1}")
            if attempt < 2:
                await consumer.fail(queue, receipt, "TimeoutError: upstream took 30 s")
        for tenant in ("globex", "initech"):
            for n in range(2):
                await _enqueue(api, queue, {"tenant": tenant, "step": n}, group=f"tenant-{tenant}")
        await _enqueue(
            api, queue, {"tenant": "umbrella"}, group="tenant-umbrella", delay_seconds=900
        )

    page.get(server.url(f"/console/queues/{queue}/groups"))
    rows = page.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 4
    stuck = page.find_elements(By.CSS_SELECTOR, "tr.stuck")
    assert [row.get_attribute("data-group") for row in stuck] == ["tenant-acme"]
    assert "3 of 5" in stuck[0].text and "blocked" in stuck[0].text
    assert page.find_element(By.CSS_SELECTOR, "[data-stuck-count]").text.startswith("1 group")
    screenshot(page, "groups")

    click_and_wait(page, 'nav[aria-label="Group state"] a[href*="state=waiting"]')
    waiting = page.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.get_attribute("data-group") for r in waiting] == ["tenant-umbrella"]
    click_and_wait(page, 'nav[aria-label="Group state"] a[href*="state=ready"]')
    ready = {r.get_attribute("data-group") for r in page.find_elements(By.CSS_SELECTOR, "tbody tr")}
    assert ready == {"tenant-globex", "tenant-initech"}
    # A group's name leads to its messages.
    click_and_wait(page, 'tr[data-group="tenant-globex"] td:first-child a')
    assert page.find_element(By.ID, "group").get_attribute("value") == "tenant-globex"
    assert len(page.find_elements(By.CSS_SELECTOR, "tbody tr")) == 2


async def test_a_message_reads_as_a_timeline_and_completed_ones_keep_their_result(
    page: Driver, server: ConsoleServer, storage: PostgresStorage
) -> None:
    async with server.api() as api:
        queue = await _create(api, "billing", completed_retention_seconds=3600)
        consumer = Consumer(api, storage)
        done = await _enqueue(
            api, queue, {"invoice": 2041, "customer": "acme", "lines": 3}, group="acme"
        )
        receipt = await consumer.take(queue, "billing-worker-1")
        await consumer.fail(queue, receipt, "ConnectionError: ledger unreachable (10.0.3.7:5432)")
        receipt = await consumer.take(queue, "billing-worker-2")
        await consumer.finish(queue, receipt, json.dumps({"paid": True, "ledger_id": "L-88"}))
        flying = await _enqueue(api, queue, {"invoice": 2042, "customer": "globex"})
        await consumer.take(queue, "billing-worker-2")

    page.get(server.url(f"/console/queues/{queue}/messages"))
    click_and_wait(page, 'nav[aria-label="State"] a[href*="state=completed"]')
    assert _row_ids(page) == [done]
    assert "completed" in page.find_element(By.CSS_SELECTOR, "tbody").text
    screenshot(page, "messages-completed")

    click_and_wait(page, "tbody tr:first-child td a")
    events = page.find_elements(By.CSS_SELECTOR, "ol.timeline li.attempt")
    assert [(e.get_attribute("data-attempt"), e.get_attribute("data-outcome")) for e in events] == [
        ("1", "released"),
        ("2", "acknowledged"),
    ]
    consumers = [e.find_element(By.CSS_SELECTOR, "[data-consumer]").text for e in events]
    assert consumers == ["billing-worker-1", "billing-worker-2"]
    error = events[0].find_element(By.CSS_SELECTOR, "[data-error]").text
    assert error == "ConnectionError: ledger unreachable (10.0.3.7:5432)"
    completed = page.find_element(By.CSS_SELECTOR, "[data-completed]").text
    assert "Completed" in completed and "Kept until" in completed
    result = page.find_element(By.CSS_SELECTOR, "pre[data-result]").text
    assert result == '{\n  "paid": true,\n  "ledger_id": "L-88"\n}'
    # Every time on the page is 24-hour UTC.
    times = [t.text for t in page.find_elements(By.CSS_SELECTOR, "ol.timeline time")]
    assert times and all(re.fullmatch(r"\d{4}-\d\d-\d\d [0-2]\d:[0-5]\d:[0-5]\d", t) for t in times)
    screenshot(page, "message-timeline")

    page.get(server.url(f"/console/queues/{queue}/messages/{flying}"))
    [attempt] = page.find_elements(By.CSS_SELECTOR, "ol.timeline li.attempt")
    assert attempt.get_attribute("data-outcome") == "in_flight"
    assert "billing-worker-2" in attempt.text


async def test_search_and_bulk_delete_of_messages_after_a_dry_run(
    page: Driver, server: ConsoleServer
) -> None:
    async with server.api() as api:
        queue = await _create(api, "orders-search")
        acme = [
            await _enqueue(api, queue, {"customer": "acme", "order": n}, group="eu")
            for n in range(4)
        ]
        others = [
            await _enqueue(api, queue, {"customer": "globex", "order": 10 + n}, group="us")
            for n in range(3)
        ]
        await _enqueue(api, queue, "plain text is never a match")
    page.get(server.url(f"/console/queues/{queue}/messages"))
    _type(page, "match", '{"customer": "acme"}')
    click_and_wait(page, 'form[role="search"] button[type="submit"]')
    assert _row_ids(page) == acme
    screenshot(page, "messages-search")
    _type(page, "group", "us")
    _type(page, "match", "")
    click_and_wait(page, 'form[role="search"] button[type="submit"]')
    assert _row_ids(page) == others

    # Not a JSON object: said next to the field, with its code, and nothing searched.
    _type(page, "group", "")
    _type(page, "match", "customer=acme")
    click_and_wait(page, 'form[role="search"] button[type="submit"]')
    code, words = _error(page, "match")
    assert code == "invalid_match" and words.startswith("match must be a JSON object.")
    assert "invalid_match" in words and _row_ids(page) == []
    screenshot(page, "messages-search-invalid")

    # Delete everything matching: the confirmation states the dry run's count first.
    _type(page, "match", '{"customer": "acme"}')
    click_and_wait(page, 'form[role="search"] button[type="submit"]')
    click_and_wait(page, ".bulk-bar a")
    assert _count(page) == 4
    assert page.find_element(By.CSS_SELECTOR, "[data-filter]").text.count("acme") == 1
    screenshot(page, "messages-bulk-delete")
    assert (await _queue(server, queue))["stats"]["ready"] == 8
    click_and_wait(page, 'form[method="post"] button[type="submit"]')
    assert _notice(page) == "Deleted 4 messages matching the filter."
    assert _row_ids(page) == []  # back on the same search, now empty
    async with server.api() as api:
        left = (await api.get(f"/v1/queues/{queue}/messages")).json()["items"]
    assert len(left) == 4 and not {m["id"] for m in left} & set(acme)
    [row] = await _audit(server, queue, "message.deleted")
    assert row["details"]["filter"] == {"match": {"customer": "acme"}}
    assert row["details"]["deleted"] == 4 and row["actor"] == "anonymous"


async def test_dead_letters_search_detail_and_bulk_redrive_and_delete(
    page: Driver, server: ConsoleServer, storage: PostgresStorage
) -> None:
    async with server.api() as api:
        queue = await _create(api, "payouts", max_delivery_attempts=2)
        consumer = Consumer(api, storage)
        for n, region in enumerate(("eu", "eu", "eu", "us", "us")):
            await _enqueue(api, queue, {"payout": n, "region": region}, group=region)
        for attempt in range(2):
            for _ in range(5):
                receipt = await consumer.take(queue, f"payout-worker-{attempt + 1}")
                await consumer.fail(queue, receipt, f"PayoutDeclined: attempt {attempt + 1}")
        assert (await api.post(f"/v1/queues/{queue}/messages/dequeue")).status_code == 204
    base = f"/console/queues/{queue}/dead-letters"
    page.get(server.url(base))
    assert len(page.find_elements(By.CSS_SELECTOR, "tbody tr")) == 5
    assert "PayoutDeclined: attempt 2" in page.find_element(By.TAG_NAME, "tbody").text

    click_and_wait(page, "tbody tr:first-child td a")
    attempts = page.find_elements(By.CSS_SELECTOR, "ol.timeline li.attempt")
    assert [a.get_attribute("data-outcome") for a in attempts] == ["released", "released"]
    # Lanes interleave the deliveries: who had which attempt is whatever the claims chose,
    # and the page shows exactly that.
    names = [a.find_element(By.CSS_SELECTOR, "[data-consumer]").text for a in attempts]
    errors = [a.find_element(By.CSS_SELECTOR, "[data-error]").text for a in attempts]
    assert all(re.fullmatch(r"payout-worker-[12]", name) for name in names), names
    assert all(re.fullmatch(r"PayoutDeclined: attempt [12]", error) for error in errors)
    assert page.find_element(By.CSS_SELECTOR, "[data-last-error]").text == errors[-1]
    screenshot(page, "dead-letter-timeline")

    page.get(server.url(base))
    _type(page, "group", "eu")
    click_and_wait(page, 'form[role="search"] button[type="submit"]')
    assert len(page.find_elements(By.CSS_SELECTOR, "tbody tr")) == 3
    _type(page, "redrive-limit", "2")
    click_and_wait(page, 'form[action$="/dead-letters/redrive"] button')
    assert _count(page) == 2
    screenshot(page, "dead-letters-bulk-redrive")
    assert (await _queue(server, queue))["stats"]["dead_letters"] == 5
    click_and_wait(page, 'form[method="post"] button[type="submit"]')
    assert _notice(page) == "Redrove 2 dead letters, oldest first."
    stats = (await _queue(server, queue))["stats"]
    assert (stats["dead_letters"], stats["ready"]) == (3, 2)
    [redriven] = await _audit(server, queue, "dead_letter.redriven")
    assert redriven["details"]["filter"] == {"group": "eu"}

    _type(page, "group", "")
    _type(page, "match", '{"region": "us"}')
    click_and_wait(page, 'form[role="search"] button[type="submit"]')
    click_and_wait(page, 'form[action$="/dead-letters/delete"] button')
    assert _count(page) == 2
    assert (
        "Delete 2 dead letters"
        in page.find_element(By.CSS_SELECTOR, "main form[method='post']").text
    )
    click_and_wait(page, 'form[method="post"] button[type="submit"]')
    assert _notice(page) == "Deleted 2 dead letters matching the filter."
    async with server.api() as api:
        remaining = (await api.get(f"/v1/queues/{queue}/dead-letters")).json()["items"]
    assert [json.loads(r["payload"])["region"] for r in remaining] == ["eu"]
    [deleted] = await _audit(server, queue, "dead_letter.deleted")
    assert deleted["details"]["deleted"] == 2
    screenshot(page, "dead-letters-search")


async def test_a_queue_is_created_and_deleted_from_the_console(
    page: Driver, server: ConsoleServer
) -> None:
    page.get(server.url("/console/"))
    click_and_wait(page, 'a[href="/console/queues/new"]')
    _type(page, "name", "Receipts!")
    _type(page, "max_in_flight", "0")
    click_and_wait(page, '#new-queue button[type="submit"]')
    assert _error(page, "name")[0] == "invalid_queue_name"
    assert _error(page, "max_in_flight")[0] == "invalid_max_in_flight"
    screenshot(page, "queue-new")
    _type(page, "name", "receipts")
    _type(page, "max_in_flight", "20")
    _type(page, "completed_retention_seconds", "600")
    click_and_wait(page, '#new-queue button[type="submit"]')
    assert _notice(page) == "Queue receipts created."
    queue = page.current_url.split("/queues/")[1].split("?")[0]
    found = await _queue(server, queue)
    assert found["name"] == "receipts" and found["max_in_flight"] == 20
    assert found["completed_retention_seconds"] == 600
    [created] = await _audit(server, queue, "queue.created")
    assert created["actor"] == "anonymous"

    # A taken name is the API's 409, next to the name.
    page.get(server.url("/console/queues/new"))
    _type(page, "name", "receipts")
    click_and_wait(page, '#new-queue button[type="submit"]')
    assert _error(page, "name") == (
        "queue_already_exists",
        "A queue named 'receipts' already exists.",
    )

    async with server.api() as api:
        for n in range(3):
            await _enqueue(api, queue, {"receipt": n})
    page.get(server.url(f"/console/queues/{queue}"))
    click_and_wait(page, 'a[href$="/delete"]')
    assert page.find_element(By.CSS_SELECTOR, "[data-live-count]").text == "3"
    _type(page, "confirm_name", "receipt")
    click_and_wait(page, 'main form button[type="submit"]')
    assert "Nothing was deleted" in page.find_element(By.CLASS_NAME, "alert").text
    assert (await _queue(server, queue))["stats"]["ready"] == 3
    _type(page, "confirm_name", "receipts")
    screenshot(page, "queue-delete")
    click_and_wait(page, 'main form button[type="submit"]')
    assert _notice(page) == (
        "Queue receipts deleted, with its messages, dead letters and schedules."
    )
    async with server.api() as api:
        gone = await api.get(f"/v1/queues/{queue}")
    assert gone.status_code == 404 and gone.json()["code"] == "queue_not_found"
    [deleted] = await _audit(server, queue, "queue.deleted")
    assert deleted["actor"] == "anonymous"
