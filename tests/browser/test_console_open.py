"""The console with auth off, in headless Chromium against a real `retsu api`: every page
loads, and pause, resume, settings (a bad value, then a good one), purge, redrive (one and
in bulk) and delete work — checked through the JSON API and the audit log. The forms are
used with JavaScript switched off; the live refresh with it on. Each page is screenshotted
into docs/console/screenshots/.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.browser.conftest import ConsoleServer, screenshot, start_server
from tests.support.browser import click_and_wait
from tests.support.processes import RetsuProcess, free_port, retsu_env

pytestmark = pytest.mark.integration

Driver = webdriver.Chrome


@pytest.fixture(scope="module")
def server(
    console_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleServer]:
    logs = Path(tmp_path_factory.mktemp("console-open"))
    started = start_server(console_database, logs)
    # The collector's leader stores the history snapshots the charts draw (every 5 s here).
    collector = RetsuProcess(
        ["worker", "run", "queue", "state-metrics-collector"],
        retsu_env(
            console_database,
            worker__management__port=str(free_port()),
            worker__queue__state_metrics_collector__collection_interval_seconds="5",
        ),
        logs / "collector.log",
    )
    try:
        yield started
    finally:
        assert collector.stop() == 0, collector.output()
        assert started.process.stop() == 0, started.process.output()


@dataclass
class Queues:
    orders: str  # messages in every state
    payments: str  # dead letters
    emails: str  # paused, empty


async def _create(api: httpx.AsyncClient, name: str, **settings: Any) -> str:
    response = await api.post("/v1/queues", json={"name": name, **settings})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _enqueue(
    api: httpx.AsyncClient, queue: str, payload: str, priority: str, **more: Any
) -> None:
    body = {"payload": payload, "priority": priority, **more}
    response = await api.post(f"/v1/queues/{queue}/messages", json=body)
    assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
async def queues(server: ConsoleServer) -> AsyncIterator[Queues]:
    async with server.api() as api:
        orders = await _create(api, "orders", visibility_timeout_seconds=300)
        for n in range(12):
            priority = ("HIGH", "MEDIUM", "LOW")[n % 3]
            payload = json.dumps({"order": 1000 + n, "items": [{"sku": "A-1", "qty": n + 1}]})
            await _enqueue(api, orders, payload, priority)
        await _enqueue(api, orders, "plain text, not JSON", "LOW", delay_seconds=3600)
        taken = await api.post(
            f"/v1/queues/{orders}/messages/dequeue",
            json={"max_messages": 2},
            headers={"retsu-consumer": "orders-worker-1"},
        )
        assert len(taken.json()["messages"]) == 2

        payments = await _create(api, "payments", max_delivery_attempts=1)
        for n in range(6):
            payload = json.dumps({"payment": n, "amount": {"value": 1999 + n, "currency": "EUR"}})
            await _enqueue(api, payments, payload, "HIGH" if n % 2 else "MEDIUM")
            got = (await api.post(f"/v1/queues/{payments}/messages/dequeue")).json()
            release = {"receipt_handle": got["receipt_handle"], "visibility_timeout_seconds": 0}
            await api.post(f"/v1/queues/{payments}/messages/{got['id']}/visibility", json=release)
        # This dequeue moves the six exhausted messages to the dead letters.
        assert (await api.post(f"/v1/queues/{payments}/messages/dequeue")).status_code == 204

        emails = await _create(api, "emails")
        assert (await api.post(f"/v1/queues/{emails}/pause")).status_code == 200
        yield Queues(orders, payments, emails)


async def _stats(server: ConsoleServer, queue: str) -> dict[str, Any]:
    async with server.api() as api:
        body: dict[str, Any] = (await api.get(f"/v1/queues/{queue}")).json()
        return body


async def _audit(server: ConsoleServer, queue: str, action: str) -> list[dict[str, Any]]:
    async with server.api() as api:
        response = await api.get("/v1/audit-log", params={"queue_id": queue, "action": action})
        items: list[dict[str, Any]] = response.json()["items"]
        return items


_ROW = """
const name = arguments[0];
for (const row of document.querySelectorAll("tbody tr")) {
  const cells = Array.from(row.querySelectorAll("td"));
  if (cells.length && cells[0].textContent.trim() === name) {
    return cells.map((cell) => [cell.textContent.trim(), getComputedStyle(cell).textAlign]);
  }
}
return null;
"""


def _row(driver: Driver, name: str) -> list[tuple[str, str]]:
    """A queue's row on the overview as (text, text-align) per cell, read in one go (the
    live refresh may swap the table between two separate reads)."""
    found = driver.execute_script(_ROW, name)
    assert found is not None, name
    return [(text, align) for text, align in found]


def _cells(row: list[tuple[str, str]]) -> list[str]:
    return [text for text, _ in row]


def _click(driver: Driver, selector: str) -> None:
    click_and_wait(driver, selector)


def _notice(driver: Driver) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, ".notice")
    assert found, driver.page_source[:3000]
    return found[0].text


@pytest.fixture
def page(browser: Driver, server: ConsoleServer) -> Iterator[Driver]:
    browser.get(server.url("/console/static/console.css"))
    browser.delete_all_cookies()
    yield browser
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


def _javascript_off(driver: Driver) -> None:
    driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})


async def test_overview_lists_every_queue_and_refreshes_itself(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    page.get(server.url("/console/"))
    assert page.title == "Queues · Retsu"
    orders = _cells(_row(page, "orders"))
    # Queue, state, ready, in flight, delayed, dead letters, oldest ready age.
    assert orders[1:6] == ["active", "10", "2", "1", "0"]
    emails = _cells(_row(page, "emails"))
    # An empty queue has no oldest-ready age ("—", never "0 s").
    assert emails[1] == "paused" and emails[6] == "—"
    assert _cells(_row(page, "payments"))[5] == "6"
    aligned = [align for _, align in _row(page, "orders")]
    assert aligned[:8] == ["left", "left", *["right"] * 6]  # numbers right-aligned
    # The live refresh swaps the table under the reads below: a swapped element is read
    # again at the next poll.
    swapped = (StaleElementReferenceException, WebDriverException)
    WebDriverWait(page, 5, ignored_exceptions=swapped).until(
        lambda d: "updated" in d.find_element(By.CSS_SELECTOR, "[data-live-indicator]").text
    )
    # 24-hour UTC like every other time on the page, whatever the browser's locale.
    indicator = page.find_element(By.CSS_SELECTOR, "[data-live-indicator]").text
    assert re.fullmatch(r"Live · updated ([01]\d|2[0-3]):[0-5]\d:[0-5]\d UTC", indicator), indicator
    screenshot(page, "overview")

    # A marker on the window: gone if the page reloaded, kept if only the table changed.
    page.execute_script("window.retsuMarker = 'kept'")
    async with server.api() as api:
        await _enqueue(api, queues.orders, '{"order": "late"}', "HIGH")
    WebDriverWait(page, 12, poll_frequency=0.2, ignored_exceptions=swapped).until(
        lambda d: _cells(_row(d, "orders"))[2] == "11"
    )
    assert page.execute_script("return window.retsuMarker") == "kept"

    # Dark mode follows the system setting.
    page.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    try:
        page.get(server.url("/console/"))
        background = page.find_element(By.TAG_NAME, "body").value_of_css_property(
            "background-color"
        )
        assert background == "rgba(19, 21, 24, 1)"
        screenshot(page, "overview-dark")
    finally:
        page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


async def test_pause_resume_and_settings_without_javascript(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    _javascript_off(page)
    page.get(server.url(f"/console/queues/{queues.orders}"))
    assert "Live" not in page.find_element(By.TAG_NAME, "body").text
    screenshot(page, "queue")

    _click(page, 'form[action$="/pause"] button')
    assert "Queue paused" in _notice(page)
    assert (await _stats(server, queues.orders))["paused"] is True
    _click(page, 'form[action$="/resume"] button')
    assert "Queue resumed" in _notice(page)
    assert (await _stats(server, queues.orders))["paused"] is False
    assert [e["actor"] for e in await _audit(server, queues.orders, "queue.paused")] == [
        "anonymous"
    ]
    assert len(await _audit(server, queues.orders, "queue.resumed")) == 1

    # A bad value: the use case's error next to the field, nothing saved.
    field = page.find_element(By.ID, "visibility_timeout_seconds")
    field.clear()
    field.send_keys("0")
    _click(page, '#settings button[type="submit"]')
    error = page.find_element(By.ID, "visibility_timeout_seconds-error")
    assert error.text == "visibility_timeout_seconds must be between 1 and 21600, got 0."
    assert error.get_attribute("data-code") == "invalid_visibility_timeout"
    screenshot(page, "queue-settings-error")
    assert (await _stats(server, queues.orders))["visibility_timeout_seconds"] == 300
    assert await _audit(server, queues.orders, "queue.updated") == []

    field = page.find_element(By.ID, "visibility_timeout_seconds")
    field.clear()
    field.send_keys("45")
    _click(page, '#settings button[type="submit"]')
    assert _notice(page) == "Settings saved."
    assert page.find_element(By.ID, "visibility_timeout_seconds").get_attribute("value") == "45"
    assert (await _stats(server, queues.orders))["visibility_timeout_seconds"] == 45
    updated = await _audit(server, queues.orders, "queue.updated")
    assert updated[0]["details"] == {"changes": {"visibility_timeout_seconds": 45}}


async def test_the_message_browser_tabs_filter_page_detail_and_delete(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    _javascript_off(page)
    page.get(server.url(f"/console/queues/{queues.orders}/messages"))
    assert len(page.find_elements(By.CSS_SELECTOR, "tbody tr")) >= 13
    screenshot(page, "messages")
    _click(page, 'nav[aria-label="State"] a[href*="state=in_flight"]')
    states = [td.text for td in page.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(3)")]
    assert states == ["in flight", "in flight"]
    _click(page, 'nav[aria-label="State"] a[href*="state=ready"]')
    _click(page, 'nav[aria-label="Priority"] a[href*="priority=MEDIUM"]')
    rows = page.find_elements(By.CSS_SELECTOR, "tbody tr")
    priorities = {row.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text for row in rows}
    assert priorities == {"MEDIUM"} and len(rows) == 4
    async with server.api() as api:
        listed = await api.get(
            f"/v1/queues/{queues.orders}/messages", params={"state": "ready", "priority": "MEDIUM"}
        )
    expected = [item["id"] for item in listed.json()["items"]]
    shown = [
        a.get_attribute("href").rsplit("/", 1)[1].split("?")[0]
        for a in page.find_elements(By.CSS_SELECTOR, "tbody td:first-child a")
    ]
    assert shown == expected  # the API's order: priority, then enqueue order

    _click(page, "tbody tr:first-child td a")
    payload = page.find_element(By.CSS_SELECTOR, "pre[data-payload]").text
    assert payload.startswith('{\n  "order": ')
    screenshot(page, "message")
    # Delete asks first, naming the one message; nothing is gone until it is confirmed.
    _click(page, 'a[href*="/delete?back="]')
    confirm = page.find_element(By.CSS_SELECTOR, '[data-confirm="delete-message"]')
    assert confirm.find_element(By.CSS_SELECTOR, "[data-confirm-count]").text == "1"
    assert expected[0] in confirm.text
    screenshot(page, "message-delete")
    async with server.api() as api:
        still = await api.get(f"/v1/queues/{queues.orders}/messages/{expected[0]}")
    assert still.status_code == 200
    _click(page, 'main form[action$="/delete"] button[type="submit"]')
    assert _notice(page) == "Message deleted."
    assert "state=ready" in page.current_url and "priority=MEDIUM" in page.current_url
    async with server.api() as api:
        gone = await api.get(f"/v1/queues/{queues.orders}/messages/{expected[0]}")
    assert gone.status_code == 404 and gone.json()["code"] == "message_not_found"
    deleted = await _audit(server, queues.orders, "message.deleted")
    assert [(e["target_id"], e["actor"]) for e in deleted] == [(expected[0], "anonymous")]


async def test_purge_shows_the_live_count_and_asks_for_the_name(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    _javascript_off(page)
    page.get(server.url(f"/console/queues/{queues.orders}"))
    _click(page, 'a[href$="/purge"]')
    stats = (await _stats(server, queues.orders))["stats"]
    live = stats["ready"] + stats["in_flight"] + stats["delayed"]
    assert page.find_element(By.CSS_SELECTOR, "[data-live-count]").text == str(live)
    screenshot(page, "purge")

    page.find_element(By.ID, "confirm_name").send_keys("order")
    _click(page, 'form[action$="/purge"] button')
    assert (
        "Type the queue's name, orders, to confirm"
        in page.find_element(By.CLASS_NAME, "alert").text
    )
    assert (await _stats(server, queues.orders))["stats"]["ready"] == stats["ready"]

    field = page.find_element(By.ID, "confirm_name")
    field.clear()
    field.send_keys("orders")
    _click(page, 'form[action$="/purge"] button')
    assert _notice(page) == f"Purged {live} messages."
    after = (await _stats(server, queues.orders))["stats"]
    assert after["ready"] + after["in_flight"] + after["delayed"] == 0
    purged = await _audit(server, queues.orders, "queue.purged")
    assert len(purged) == 1 and purged[0]["actor"] == "anonymous"


async def test_dead_letters_redrive_one_in_bulk_and_delete(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    _javascript_off(page)
    base = f"/console/queues/{queues.payments}/dead-letters"
    page.get(server.url(base))
    rows = page.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 6
    screenshot(page, "dead-letters")

    _click(page, "tbody tr:first-child td a")
    payload = page.find_element(By.CSS_SELECTOR, "pre[data-payload]").text
    assert payload.startswith('{\n  "payment": 5,\n  "amount": {')
    screenshot(page, "dead-letter")
    _click(page, 'form[action$="/redrive"] button')
    assert "Dead letter redriven" in _notice(page)
    stats = (await _stats(server, queues.payments))["stats"]
    assert (stats["dead_letters"], stats["ready"]) == (5, 1)

    # Delete one: a confirmation page first.
    _click(page, 'tbody tr:first-child a[href$="/delete"]')
    assert "Delete this dead letter?" in page.find_element(By.TAG_NAME, "h2").text
    assert (await _stats(server, queues.payments))["stats"]["dead_letters"] == 5
    _click(page, 'main form[action$="/delete"] button[type="submit"]')
    assert _notice(page) == "Dead letter deleted."
    assert (await _stats(server, queues.payments))["stats"]["dead_letters"] == 4

    # Redrive in bulk: the confirmation states the dry run's count; a wrong limit is shown
    # next to its field there.
    limit = page.find_element(By.ID, "redrive-limit")
    limit.clear()
    limit.send_keys("1001")
    _click(page, 'form[action$="/dead-letters/redrive"] button')
    assert page.find_element(By.ID, "limit-error").text == (
        "limit must be between 1 and 1000, got 1001."
    )
    limit = page.find_element(By.ID, "limit")
    limit.clear()
    limit.send_keys("3")
    _click(page, 'form[method="get"] button[type="submit"]')
    assert page.find_element(By.CSS_SELECTOR, "[data-confirm-count]").text == "3"
    assert (await _stats(server, queues.payments))["stats"]["dead_letters"] == 4
    _click(page, 'form[method="post"][action$="/dead-letters/redrive"] button[type="submit"]')
    assert _notice(page) == "Redrove 3 dead letters, oldest first."
    stats = (await _stats(server, queues.payments))["stats"]
    assert (stats["dead_letters"], stats["ready"]) == (1, 4)

    redriven = await _audit(server, queues.payments, "dead_letter.redriven")
    assert len(redriven) == 2 and {e["actor"] for e in redriven} == {"anonymous"}
    assert len(await _audit(server, queues.payments, "dead_letter.deleted")) == 1


async def test_audit_log_filters_by_queue_and_action(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    page.get(server.url("/console/audit"))
    actions = [cell.text for cell in page.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(3)")]
    assert "queue.created" in actions and "queue.paused" in actions
    screenshot(page, "audit")
    Select(page.find_element(By.ID, "queue_id")).select_by_visible_text("emails")
    Select(page.find_element(By.ID, "action")).select_by_visible_text("queue.paused")
    _click(page, '.filters button[type="submit"]')
    rows = page.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 1
    assert "queue emails" in rows[0].text


async def test_consumers_and_charts(page: Driver, server: ConsoleServer, queues: Queues) -> None:
    # The API writes what it saw of consumers every 5 s; the collector snapshots every 5 s.
    async with server.api() as api:
        await api.post(
            f"/v1/queues/{queues.orders}/messages/dequeue",
            headers={"retsu-consumer": "orders-worker-2"},
        )

    def consumers_listed(driver: Driver) -> bool:
        driver.get(server.url("/console/consumers"))
        return "orders-worker-2" in driver.find_element(By.TAG_NAME, "main").text

    WebDriverWait(page, 20, poll_frequency=1).until(consumers_listed)
    names = [td.text for td in page.find_elements(By.CSS_SELECTOR, "tbody td:first-child")]
    assert {"orders-worker-1", "orders-worker-2"} <= set(names)
    assert "healthy" in page.find_element(By.TAG_NAME, "tbody").text
    screenshot(page, "consumers")

    def charted(driver: Driver) -> bool:
        driver.get(server.url(f"/console/queues/{queues.orders}?window=1h"))
        return bool(driver.find_elements(By.CSS_SELECTOR, "svg.chart polyline"))

    WebDriverWait(page, 30, poll_frequency=1).until(charted)
    assert len(page.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2
    # A young queue's chart spans the minutes it has history for, not an empty hour.
    covers = page.find_element(By.CSS_SELECTOR, "[data-covers]").text
    assert "this queue has history for, of the 1 h window" in covers, covers
    screenshot(page, "queue-charts")
    page.get(server.url(f"/console/queues/{queues.orders}?window=7d"))
    assert (
        page.find_element(By.CSS_SELECTOR, 'nav[aria-label="Chart window"] a[aria-current]').text
        == "7 d"
    )
    page.get(server.url("/console/"))
    assert page.find_elements(By.CSS_SELECTOR, "svg.spark")
    screenshot(page, "overview")


async def test_schedules_create_pause_resume_and_delete_after_confirming(
    page: Driver, server: ConsoleServer, queues: Queues
) -> None:
    _javascript_off(page)
    page.get(server.url(f"/console/queues/{queues.emails}/schedules"))
    assert "No schedules" in page.find_element(By.TAG_NAME, "main").text
    for field, value in (
        ("s-name", "digest"),
        ("s-cron", "30 2 * * *"),
        ("s-timezone", "Europe/Berlin"),
        ("s-payload", '{"digest": "daily"}'),
    ):
        element = page.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)
    Select(page.find_element(By.ID, "s-priority")).select_by_value("LOW")
    _click(page, '#new-schedule button[type="submit"]')
    assert "Schedule created" in _notice(page)
    row = page.find_element(By.CSS_SELECTOR, 'tr[data-schedule="digest"]').text
    assert "30 2 * * *" in row and "Europe/Berlin" in row and "active" in row
    screenshot(page, "schedules")
    async with server.api() as api:
        [made] = (await api.get(f"/v1/queues/{queues.emails}/schedules")).json()["items"]
    assert made["next_run_at"] is not None and made["message"]["priority"] == "LOW"

    _click(page, f'form[action$="/schedules/{made["id"]}/pause"] button')
    assert "Schedule paused" in _notice(page)
    _click(page, f'form[action$="/schedules/{made["id"]}/resume"] button')
    assert "Schedule resumed" in _notice(page)
    _click(page, f'a[href$="/schedules/{made["id"]}/delete"]')
    assert "Delete schedule digest?" in page.find_element(By.TAG_NAME, "h2").text
    screenshot(page, "schedule-delete")
    _click(page, 'main form button[type="submit"]')
    assert "Schedule deleted" in _notice(page)
    async with server.api() as api:
        listed = (await api.get(f"/v1/queues/{queues.emails}/schedules")).json()["items"]
    assert listed == []
    actions = ["schedule.created", "schedule.paused", "schedule.resumed", "schedule.deleted"]
    for action in actions:
        assert len(await _audit(server, queues.emails, action)) == 1, action
