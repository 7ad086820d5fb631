"""The console's flow control, history and bulk pages (SPEC §3.9–§3.11) over the in-memory
app: the settings form with the flow-control and history settings, the Groups tab, the
message timeline and completed messages, search by ``match`` and ``group``, bulk actions
with their dry-run confirmation, creating and deleting queues — every action checked
through the JSON API, the use cases and the audit log.

The real-browser run against a real `retsu` process is tests/browser/.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.memory.clock import ManualClock
from retsu.application.messages import (
    AcknowledgeCommand,
    ChangeVisibilityCommand,
    DequeueCommand,
    MessageService,
)
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.message import Receipt
from retsu.entrypoints.containers import ApiContainer
from tests.unit.http.helpers import Client, NewQueue
from tests.unit.http.test_console import audit, csrf_of, dead_letters, form_token, submit


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    """As a browser sees it: each redirect is an answer of its own."""
    async with AsyncTestClient(app=app) as test_client:
        test_client.follow_redirects = False
        yield test_client


@pytest.fixture
def messages(container: ApiContainer) -> MessageService:
    """The use case behind the message routes: a consumer's side of the story (a named
    consumer, a release with an error, an acknowledge with a result)."""
    service: MessageService = container.use_cases.messages()
    return service


async def _enqueue(client: Client, queue: str, payload: Any, **more: Any) -> str:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    body = {"payload": text, "priority": more.pop("priority", "MEDIUM"), **more}
    response = await client.post(f"/v1/queues/{queue}/messages", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _take(messages: MessageService, queue: str, consumer: str) -> Receipt:
    [delivered] = await messages.dequeue(
        DequeueCommand(UUID(queue), DequeueOptions(), consumer=consumer)
    )
    return Receipt(delivered.id, delivered.receipt_handle)


def _rows(response: httpx.Response) -> list[str]:
    """The ids of a list's rows (from their links)."""
    return re.findall(
        r'<td class="mono nowrap"><a href="[^"]+/(?:messages|dead-letters)/([^"?]+)', response.text
    )


def _error(response: httpx.Response, field: str) -> tuple[str, str]:
    """The error shown next to a field: (its code, its words)."""
    found = re.search(
        rf'<div class="error" id="{field}-error" data-code="([^"]*)">(.*?)</div>',
        response.text,
        re.S,
    )
    assert found, (field, response.text[:3000])
    return found.group(1), " ".join(found.group(2).split())


def _value(response: httpx.Response, field: str) -> str:
    found = re.search(
        rf'<input id="{field}" name="{field}"[^>]*value="([^"]*)"', response.text, re.S
    )
    assert found, field
    return found.group(1)


def _next_page(response: httpx.Response) -> dict[str, str] | None:
    """The query of a list's "Next page" link, or None when it has none."""
    link = re.search(r'href="\?([^"]+)" rel="next"', response.text)
    if link is None:
        return None
    return dict(httpx.QueryParams(link.group(1).replace("&amp;", "&")))


def _count(response: httpx.Response) -> int:
    found = re.search(r"data-confirm-count(?:=\"0\")?>([\d,]+)<", response.text)
    if found is None and 'data-confirm-count="0"' in response.text:
        return 0
    assert found, response.text[:3000]
    return int(found.group(1).replace(",", ""))


# -- settings: flow control and history ---------------------------------------------------

FLOW_FIELDS = {
    "visibility_timeout_seconds": "30",
    "max_delivery_attempts": "5",
    "default_message_ttl_seconds": "604800",
    "group_max_in_flight": "1",
    "max_in_flight": "",
    "rate_limit_per_second": "",
    "rate_limit_burst": "",
    "group_rate_limit_per_second": "",
    "group_rate_limit_burst": "",
    "completed_retention_seconds": "0",
}


async def test_settings_set_and_remove_the_flow_control_and_history_limits(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("flows"))["id"]
    page = f"/console/queues/{queue}"
    shown = await client.get(page)
    assert {name: _value(shown, name) for name in FLOW_FIELDS} == FLOW_FIELDS

    # Every wrong field at once, each error next to its field with the API's code.
    wrong = {
        **FLOW_FIELDS,
        "group_max_in_flight": "0",
        "max_in_flight": "lots",
        "rate_limit_per_second": "0.001",
        "rate_limit_burst": "100001",
        "group_rate_limit_per_second": "",
        "group_rate_limit_burst": "5",
        "completed_retention_seconds": "604801",
    }
    response = await submit(client, f"{page}/settings", wrong, page=page)
    assert response.status_code == 400
    assert _error(response, "group_max_in_flight") == (
        "invalid_group_max_in_flight",
        "group_max_in_flight must be between 1 and 10000, got 0.",
    )
    assert _error(response, "max_in_flight") == (
        "invalid_max_in_flight",
        "max_in_flight must be a whole number from 1 to 1000000.",
    )
    assert _error(response, "rate_limit_per_second") == (
        "invalid_rate_limit",
        "per_second must be a number from 0.01 to 100000.",
    )
    assert _error(response, "rate_limit_burst") == (
        "invalid_rate_limit",
        "burst must be between 1 and 100000, got 100001.",
    )
    assert _error(response, "group_rate_limit_per_second")[0] == "invalid_rate_limit"
    assert _error(response, "completed_retention_seconds") == (
        "invalid_completed_retention",
        "completed_retention_seconds must be between 0 and 604800, got 604801.",
    )
    assert _value(response, "max_in_flight") == "lots"  # what was typed stays
    assert await audit(client, "queue.updated") == []

    good = {
        **FLOW_FIELDS,
        "group_max_in_flight": "4",
        "max_in_flight": "50",
        "rate_limit_per_second": "2.5",
        "rate_limit_burst": "10",
        "group_rate_limit_per_second": "1",
        "completed_retention_seconds": "3600",
    }
    response = await submit(client, f"{page}/settings", good, page=page)
    assert response.status_code == 303, response.text[:2000]
    found = (await client.get(f"/v1/queues/{queue}")).json()
    assert found["group_max_in_flight"] == 4 and found["max_in_flight"] == 50
    assert found["rate_limit"] == {"per_second": 2.5, "burst": 10}
    assert found["group_rate_limit"] == {"per_second": 1, "burst": 1}  # the default burst
    assert found["completed_retention_seconds"] == 3600
    [updated] = await audit(client, "queue.updated")
    assert updated["details"] == {
        "changes": {
            "group_max_in_flight": 4,
            "max_in_flight": 50,
            "rate_limit": {"per_second": 2.5, "burst": 10},
            "group_rate_limit": {"per_second": 1.0, "burst": 1},
            "completed_retention_seconds": 3600,
        }
    }
    shown = await client.get(page)
    assert _value(shown, "rate_limit_per_second") == "2.5"
    assert _value(shown, "group_rate_limit_burst") == "1"

    # An emptied limit is the API's null: the limit is removed (the rest stays).
    removed = {**good, "max_in_flight": "", "rate_limit_per_second": "", "rate_limit_burst": ""}
    response = await submit(client, f"{page}/settings", removed, page=page)
    assert response.status_code == 303
    found = (await client.get(f"/v1/queues/{queue}")).json()
    assert found["max_in_flight"] is None and found["rate_limit"] is None
    assert found["group_rate_limit"] == {"per_second": 1, "burst": 1}
    latest = (await audit(client, "queue.updated"))[0]
    assert latest["details"] == {"changes": {"max_in_flight": None, "rate_limit": None}}
    response = await submit(client, f"{page}/settings", removed, page=page)
    assert response.headers["location"].endswith("notice=unchanged")


# -- creating and deleting queues ---------------------------------------------------------


async def test_a_queue_is_created_and_deleted_after_confirming(
    client: Client, messages: MessageService
) -> None:
    form = await client.get("/console/queues/new")
    assert form.status_code == 200
    token = csrf_of(form)
    response = await client.post(
        "/console/queues",
        data={"csrf_token": token, "name": "Bad Name", **FLOW_FIELDS, "max_in_flight": "0"},
    )
    assert response.status_code == 400
    assert _error(response, "name")[0] == "invalid_queue_name"
    assert _error(response, "max_in_flight")[0] == "invalid_max_in_flight"
    assert (await client.get("/v1/queues")).json()["items"] == []

    made = {"csrf_token": token, "name": "emails", **FLOW_FIELDS, "max_in_flight": "10"}
    response = await client.post("/console/queues", data=made)
    assert response.status_code == 303
    [queue] = (await client.get("/v1/queues")).json()["items"]
    assert queue["name"] == "emails" and queue["max_in_flight"] == 10
    assert response.headers["location"] == (
        f"/console/queues/{queue['id']}?notice=created&name=emails"
    )
    assert "Queue emails created." in (await client.get(response.headers["location"])).text
    [created] = await audit(client, "queue.created")
    assert created["target_id"] == queue["id"] and created["actor"] == "anonymous"

    again = await client.post("/console/queues", data=made)
    assert again.status_code == 409
    assert _error(again, "name") == (
        "queue_already_exists",
        "A queue named &#39;emails&#39; already exists.",
    )

    # Delete: the page says what goes with the queue, and wants its name typed.
    qid = queue["id"]
    for n in range(2):
        await _enqueue(client, qid, {"n": n})
    await _take(messages, qid, "mailer")
    page = f"/console/queues/{qid}/delete"
    confirm = await client.get(page)
    assert "<strong data-live-count>2</strong> live messages" in confirm.text
    assert "(1 ready, 1 in flight, 0 delayed)" in confirm.text
    assert "<strong data-schedules>0</strong> schedules" in confirm.text
    response = await client.post(page, data={"csrf_token": token, "confirm_name": "email"})
    assert response.status_code == 400 and "Nothing was deleted" in response.text
    assert (await client.get(f"/v1/queues/{qid}")).status_code == 200
    response = await client.post(page, data={"csrf_token": token, "confirm_name": "emails"})
    assert response.status_code == 303
    assert response.headers["location"] == "/console/?notice=queue_deleted&name=emails"
    overview = await client.get(response.headers["location"])
    assert "Queue emails deleted" in overview.text
    assert (await client.get(f"/v1/queues/{qid}")).status_code == 404
    [deleted] = await audit(client, "queue.deleted")
    assert deleted["target_id"] == qid and deleted["actor"] == "anonymous"


# -- groups ---------------------------------------------------------------------------------


async def test_the_groups_tab_filters_by_state_and_makes_stuck_heads_stand_out(
    client: Client, new_queue: NewQueue, messages: MessageService
) -> None:
    queue = (await new_queue("lanes", max_delivery_attempts=5))["id"]
    for n in range(3):
        await _enqueue(client, queue, {"lane": "a", "n": n}, group="a")
    # Group a's head fails twice and is delivered a third time: its lane waits behind it.
    for attempt in range(3):
        receipt = await _take(messages, queue, f"worker-{attempt}")
        if attempt < 2:
            await messages.change_visibility(
                ChangeVisibilityCommand(UUID(queue), receipt, 0, error="TimeoutError")
            )
    await _enqueue(client, queue, {"lane": "b"}, group="b")
    await _enqueue(client, queue, {"lane": "c"}, group="c", delay_seconds=600)
    page = f"/console/queues/{queue}/groups"
    shown = await client.get(page)
    assert shown.status_code == 200
    groups = re.findall(r'<tr data-group="([^"]+)"', shown.text)
    assert sorted(groups) == ["a", "b", "c"]
    assert re.findall(r'<tr data-group="([^"]+)" class="stuck"', shown.text) == ["a"]
    assert 'data-stuck-count="1"' in shown.text
    assert "3 of 5</span>" in shown.text
    assert '>Groups<span class="count">3</span>' in shown.text

    for state, expected in (("blocked", ["a"]), ("ready", ["b"]), ("waiting", ["c"])):
        filtered = await client.get(page, params={"state": state})
        assert re.findall(r'<tr data-group="([^"]+)"', filtered.text) == expected, state
    bad = await client.get(page, params={"state": "stuck"})
    assert bad.status_code == 400 and "invalid_state" in bad.text


async def test_the_groups_tab_pages(client: Client, new_queue: NewQueue) -> None:
    queue = (await new_queue("many-lanes"))["id"]
    batch = [{"payload": "x", "priority": "LOW", "group": f"g-{n:03}"} for n in range(55)]
    response = await client.post(f"/v1/queues/{queue}/messages/batch", json={"messages": batch})
    assert response.status_code == 201
    first = await client.get(f"/console/queues/{queue}/groups")
    assert len(re.findall(r"<tr data-group=", first.text)) == 50
    following = _next_page(first)
    assert following is not None
    second = await client.get(f"/console/queues/{queue}/groups", params=following)
    assert len(re.findall(r"<tr data-group=", second.text)) == 5
    shown = re.findall(r'<tr data-group="([^"]+)"', first.text + second.text)
    assert sorted(shown) == [f"g-{n:03}" for n in range(55)]


# -- the message timeline and completed messages --------------------------------------------


async def test_a_message_reads_as_a_timeline_and_a_completed_one_keeps_its_result(
    client: Client, new_queue: NewQueue, messages: MessageService, clock: ManualClock
) -> None:
    queue = (await new_queue("billing", completed_retention_seconds=3600))["id"]
    done = await _enqueue(client, queue, {"invoice": 7}, group="acme", priority="HIGH")
    receipt = await _take(messages, queue, "worker-7")
    clock.advance(2)
    await messages.change_visibility(
        ChangeVisibilityCommand(UUID(queue), receipt, 0, error="ValueError: invoice 7 has no lines")
    )
    receipt = await _take(messages, queue, "worker-8")
    clock.advance(1)
    await messages.acknowledge(
        AcknowledgeCommand(
            UUID(queue), [Receipt(receipt.message_id, receipt.receipt_handle, '{"paid": true}')]
        )
    )
    live = await _enqueue(client, queue, "plain text")
    await _take(messages, queue, "worker-9")

    browser = f"/console/queues/{queue}/messages"
    completed = await client.get(browser, params={"state": "completed"})
    assert _rows(completed) == [done]
    assert "Completed (UTC)" in completed.text
    assert re.search(
        r'state=completed[^"]*" aria-current="page">Completed <span class="count">1</span>',
        completed.text,
    )
    every = await client.get(browser)
    assert done not in every.text  # completed messages are not live

    page = await client.get(f"{browser}/{done}")
    assert page.status_code == 200
    text = page.text
    attempts = re.findall(r'data-attempt="(\d)" data-outcome="([a-z_]+)"', text)
    assert attempts == [("1", "released"), ("2", "acknowledged")]
    assert re.findall(r"data-consumer>([^<]+)<", text) == ["worker-7", "worker-8"]
    assert '<pre class="attempt-error" data-error>ValueError: invoice 7 has no lines</pre>' in text
    assert "after 2.0 s" in text and "after 1.0 s" in text
    assert '<span class="badge done">completed</span>' in text
    assert "data-completed" in text and "with the result below" in text
    assert '<pre class="json" data-result>{\n  &#34;paid&#34;: true\n}</pre>' in text
    assert "Kept until" in text

    page = await client.get(f"{browser}/{live}")
    assert re.findall(r'data-attempt="(\d)" data-outcome="([a-z_]+)"', page.text) == [
        ("1", "in_flight")
    ]
    assert "<strong>In flight</strong>: its lease ends" in page.text


async def test_a_queue_without_retention_says_it_keeps_no_completed_messages(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("forgetful"))["id"]
    page = await client.get(f"/console/queues/{queue}/messages", params={"state": "completed"})
    assert page.status_code == 200
    assert "keeps no completed messages" in page.text


# -- search ---------------------------------------------------------------------------------


async def test_the_message_browser_searches_by_match_and_group(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("orders"))["id"]
    acme = [
        await _enqueue(client, queue, {"customer": "acme", "n": n}, group="eu") for n in range(3)
    ]
    await _enqueue(client, queue, {"customer": "other"}, group="eu")
    us = await _enqueue(client, queue, {"customer": "acme", "n": 9}, group="us")
    await _enqueue(client, queue, "not json", group="us")
    browser = f"/console/queues/{queue}/messages"

    def tails(ids: list[str]) -> list[str]:
        return ids

    found = await client.get(browser, params={"match": '{"customer": "acme"}'})
    assert found.status_code == 200
    assert _rows(found) == tails([*acme, us])
    found = await client.get(browser, params={"match": '{"customer": "acme"}', "group": "us"})
    assert _rows(found) == tails([us])
    found = await client.get(browser, params={"group": "eu", "state": "ready"})
    assert len(_rows(found)) == 4
    # The search stays in the state tabs and the bulk link.
    tabs = re.search(r'aria-label="State">.*?</nav>', found.text, re.S)
    assert tabs is not None and "group=eu" in tabs.group(0)
    assert f'href="{browser}/delete?state=ready&amp;group=eu"' in found.text

    for match in ("[1]", "{nope", '"acme"'):
        wrong = await client.get(browser, params={"match": match})
        assert wrong.status_code == 400
        assert _error(wrong, "match") == (
            "invalid_match",
            "match must be a JSON object. <code>invalid_match</code> — nothing was searched.",
        )
        assert _rows(wrong) == []
        assert "Fix the search above" in wrong.text
    wrong = await client.get(browser, params={"group": "has space"})
    assert wrong.status_code == 400 and _error(wrong, "group")[0] == "invalid_group"


async def test_a_search_pages_and_its_cursor_fits_only_that_search(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("paged"))["id"]
    batch = [
        {"payload": json.dumps({"kind": "a" if n % 2 else "b", "n": n}), "priority": "LOW"}
        for n in range(120)
    ]
    await client.post(f"/v1/queues/{queue}/messages/batch", json={"messages": batch[:100]})
    await client.post(f"/v1/queues/{queue}/messages/batch", json={"messages": batch[100:]})
    browser = f"/console/queues/{queue}/messages"
    seen: list[str] = []
    params: dict[str, str] = {"match": '{"kind": "a"}'}
    for _ in range(5):
        page = await client.get(browser, params=params)
        assert page.status_code == 200
        seen += _rows(page)
        following = _next_page(page)
        if following is None:
            break
        params = following
        assert params["match"] == '{"kind": "a"}'
    assert len(seen) == 60 and len(set(seen)) == 60
    # A cursor of one search is not a page of another.
    following = _next_page(await client.get(browser, params={"match": '{"kind": "a"}'}))
    assert following is not None
    cursor = following["cursor"]
    other = await client.get(browser, params={"match": '{"kind": "b"}', "cursor": cursor})
    assert other.status_code == 400 and "invalid_cursor" in other.text


async def test_dead_letters_search_and_show_attempts_and_last_error(
    client: Client, new_queue: NewQueue, messages: MessageService
) -> None:
    queue = (await new_queue("payments", max_delivery_attempts=2))["id"]
    for n, group in enumerate(("eu", "eu", "us")):
        await _enqueue(
            client,
            queue,
            {"payment": n, "currency": "EUR" if group == "eu" else "USD"},
            group=group,
        )
    for _ in range(2):
        for _ in range(3):
            receipt = await _take(messages, queue, "payer")
            await messages.change_visibility(
                ChangeVisibilityCommand(
                    UUID(queue), receipt, 0, error=f"CardDeclined: {receipt.message_id}"
                )
            )
    assert await messages.dequeue(DequeueCommand(UUID(queue))) == []  # moves the three
    page = f"/console/queues/{queue}/dead-letters"
    letters = (await client.get(f"/v1/queues/{queue}/dead-letters")).json()["items"]
    assert len(letters) == 3
    shown = await client.get(page)
    assert "CardDeclined" in shown.text  # the last error in the list
    found = await client.get(page, params={"group": "eu"})
    assert len(_rows(found)) == 2
    found = await client.get(page, params={"match": '{"currency": "USD"}'})
    assert len(_rows(found)) == 1
    wrong = await client.get(page, params={"match": "not json"})
    assert wrong.status_code == 400
    assert _error(wrong, "match")[0] == "invalid_match"
    assert "Fix the search above" in wrong.text

    letter = letters[0]["id"]
    detail = await client.get(f"{page}/{letter}")
    assert re.findall(r'data-attempt="(\d)" data-outcome="([a-z_]+)"', detail.text) == [
        ("1", "released"),
        ("2", "released"),
    ]
    assert f'<pre class="attempt-error" data-last-error>CardDeclined: {letter}</pre>' in detail.text
    assert "data-dead-lettered" in detail.text and "MAX_DELIVERY_ATTEMPTS_EXHAUSTED" in detail.text


# -- bulk actions ---------------------------------------------------------------------------


async def test_bulk_delete_of_messages_confirms_the_dry_run_count_first(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("cleanup"))["id"]
    for n in range(5):
        await _enqueue(client, queue, {"tenant": "gone", "n": n})
    keep = [await _enqueue(client, queue, {"tenant": "stays", "n": n}) for n in range(3)]
    action = f"/console/queues/{queue}/messages/delete"
    match = '{"tenant": "gone"}'

    confirm = await client.get(action, params={"match": match})
    assert confirm.status_code == 200
    assert _count(confirm) == 5
    assert "Delete 5 messages</button>" in confirm.text
    assert '<dd class="mono">{&#34;tenant&#34;: &#34;gone&#34;}</dd>' in confirm.text
    # A dry run changes nothing and is no action.
    assert (await client.get(f"/v1/queues/{queue}")).json()["stats"]["ready"] == 8
    assert await audit(client, "message.deleted") == []

    # The count confirmed is the cap: two more that match now stay.
    for n in range(2):
        await _enqueue(client, queue, {"tenant": "gone", "n": 10 + n})
    response = await client.post(
        action, data={"csrf_token": csrf_of(confirm), "match": match, "limit": "5"}
    )
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith(f"/console/queues/{queue}/messages?match=")
    assert location.endswith("notice=messages_deleted&n=5&of=5")
    assert "Deleted 5 messages matching the filter." in (await client.get(location)).text
    left = (await client.get(f"/v1/queues/{queue}/messages")).json()["items"]
    assert len(left) == 5 and set(keep) <= {m["id"] for m in left}
    [row] = await audit(client, "message.deleted")
    assert row["details"] == {"filter": {"match": {"tenant": "gone"}}, "limit": 5, "deleted": 5}

    # Fewer than confirmed (some went meanwhile): the notice says so.
    confirm = await client.get(action, params={"match": match, "state": "ready"})
    assert _count(confirm) == 2
    gone = next(m["id"] for m in left if m["id"] not in keep)
    assert (await client.delete(f"/v1/queues/{queue}/messages/{gone}")).status_code == 204
    response = await client.post(
        action,
        data={"csrf_token": csrf_of(confirm), "match": match, "state": "ready", "limit": "2"},
    )
    page = await client.get(response.headers["location"])
    assert "Deleted 1 message matching the filter. 2 were counted when you confirmed" in page.text

    # Nothing matching: nothing to confirm.
    confirm = await client.get(action, params={"match": match})
    assert _count(confirm) == 0 and 'action="' + action + '"' in confirm.text
    assert "Delete 0" not in confirm.text and 'method="post"' not in confirm.text.split("<main>")[1]
    # A wrong limit or search: shown next to its field, nothing counted.
    wrong = await client.get(action, params={"limit": "0"})
    assert wrong.status_code == 400
    assert _error(wrong, "limit") == ("invalid_limit", "limit must be between 1 and 100000, got 0.")
    wrong = await client.get(action, params={"match": "[]"})
    assert wrong.status_code == 400 and "invalid_match" in wrong.text
    assert "data-confirm-count" not in wrong.text


async def test_bulk_redrive_and_delete_of_dead_letters_by_filter(
    client: Client, new_queue: NewQueue, messages: MessageService
) -> None:
    queue = (await new_queue("refunds", max_delivery_attempts=1))["id"]
    for n, group in enumerate(("eu", "eu", "eu", "us", "us")):
        await _enqueue(client, queue, {"refund": n, "region": group}, group=group)
    for _ in range(5):
        receipt = await _take(messages, queue, "refunder")
        await messages.change_visibility(ChangeVisibilityCommand(UUID(queue), receipt, 0))
    assert await messages.dequeue(DequeueCommand(UUID(queue))) == []
    base = f"/console/queues/{queue}/dead-letters"

    # The list's bulk forms carry the search to the confirmation pages.
    listed = await client.get(base, params={"group": "eu"})
    assert f'action="{base}/redrive"' in listed.text and f'action="{base}/delete"' in listed.text
    assert '<input type="hidden" name="group" value="eu">' in listed.text

    confirm = await client.get(f"{base}/redrive", params={"group": "eu", "limit": "2"})
    assert _count(confirm) == 2 and "the count stops at the limit" in confirm.text
    response = await client.post(
        f"{base}/redrive", data={"csrf_token": csrf_of(confirm), "group": "eu", "limit": "2"}
    )
    assert response.headers["location"].endswith("group=eu&notice=redriven_many&n=2&of=2")
    stats = (await client.get(f"/v1/queues/{queue}")).json()["stats"]
    assert (stats["dead_letters"], stats["ready"]) == (3, 2)
    [redriven] = await audit(client, "dead_letter.redriven")
    assert redriven["details"]["filter"] == {"group": "eu"} and redriven["details"]["redriven"] == 2

    confirm = await client.get(f"{base}/delete", params={"match": '{"region": "us"}'})
    assert _count(confirm) == 2 and "Delete 2 dead letters</button>" in confirm.text
    response = await client.post(
        f"{base}/delete",
        data={"csrf_token": csrf_of(confirm), "match": '{"region": "us"}', "limit": "2"},
    )
    assert response.status_code == 303
    remaining = (await client.get(f"/v1/queues/{queue}/dead-letters")).json()["items"]
    assert [json.loads(r["payload"])["region"] for r in remaining] == ["eu"]
    [deleted] = await audit(client, "dead_letter.deleted")
    assert deleted["details"]["filter"] == {"match": {"region": "us"}}
    assert deleted["details"]["deleted"] == 2

    # Redrive's cap is the API's (1–1000).
    wrong = await client.get(f"{base}/redrive", params={"limit": "1001"})
    assert wrong.status_code == 400 and _error(wrong, "limit")[0] == "invalid_limit"
    # A crafted post with a bad search changes nothing.
    token = await form_token(client, base)
    response = await client.post(
        f"{base}/delete", data={"csrf_token": token, "match": "[", "limit": "5"}
    )
    assert response.status_code == 400 and "invalid_match" in response.text
    assert len((await client.get(f"/v1/queues/{queue}/dead-letters")).json()["items"]) == 1


# -- what a new operator stumbled on (issue 20) ----------------------------------------------


async def test_an_empty_queue_has_no_oldest_ready_age(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = (await new_queue("idle"))["id"]
    overview = await client.get("/console/fragments/overview")
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', overview.text)
    assert cells[-1] == "—"  # the oldest-ready cell, the last plain number cell
    page = await client.get(f"/console/queues/{queue}")
    assert '<div class="value" data-oldest-ready>—</div>' in page.text
    await _enqueue(client, queue, "x")
    clock.advance(42)
    page = await client.get(f"/console/queues/{queue}")
    assert '<div class="value" data-oldest-ready>42 s</div>' in page.text


async def test_the_live_indicator_shows_24_hour_utc() -> None:
    """The script's own words (the browser test reads the indicator itself)."""
    from retsu.adapters.http.console import STATIC

    script = (STATIC / "console.js").read_text()
    assert "toLocaleTimeString" not in script
    assert 'toISOString().slice(11, 19) + " UTC"' in script


async def test_every_destructive_action_is_a_confirmation_page_first(
    client: Client, new_queue: NewQueue
) -> None:
    """No list or detail page posts a destructive action directly: its button leads to a
    page that says what it will do and to how many."""
    queue = (await new_queue("careful", max_delivery_attempts=1))["id"]
    await dead_letters(client, queue, 1)
    await _enqueue(client, queue, "x")
    letter = (await client.get(f"/v1/queues/{queue}/dead-letters")).json()["items"][0]["id"]
    message = (await client.get(f"/v1/queues/{queue}/messages")).json()["items"][0]["id"]
    pages = (
        f"/console/queues/{queue}",
        f"/console/queues/{queue}/messages",
        f"/console/queues/{queue}/messages/{message}",
        f"/console/queues/{queue}/dead-letters",
        f"/console/queues/{queue}/dead-letters/{letter}",
    )
    destructive = re.compile(r'<form[^>]+method="post"[^>]+action="[^"]*/(delete|purge)"')
    for path in pages:
        page = await client.get(path)
        assert page.status_code == 200, path
        assert not destructive.search(page.text), path
    bulk_redrive = re.compile(r'<form[^>]+method="post"[^>]+action="[^"]*/dead-letters/redrive"')
    assert not bulk_redrive.search((await client.get(pages[3])).text)
