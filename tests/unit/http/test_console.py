"""The operator console (SPEC §3.9) over the in-memory app: pages, forms through the same
use cases (checked through the JSON API and the audit log), sessions, CSRF, scopes.

The real-browser run against a real `retsu` process is tests/browser/.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from dependency_injector import providers
from litestar import Litestar
from litestar.testing import AsyncTestClient

from retsu.adapters.http.auth import ADMIN, MESSAGES, READ, ApiToken, AuthConfig
from retsu.adapters.http.console.session import (
    COOKIE_NAME,
    SESSION_IDLE_SECONDS,
    SESSION_MAX_AGE_SECONDS,
)
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import InMemoryLeadership, InMemoryLock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.domain.errors import DatabaseUnavailable
from retsu.entrypoints.containers import ApiContainer
from tests.support.console_cookies import forge_cookie, read_cookie
from tests.support.containers import STORAGE_PORTS
from tests.unit.http.helpers import MISSING_ID, PROBLEM, Client, NewQueue, raw_request

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

ADMIN_SECRET = "console-admin-4f1e2d3c"
READ_SECRET = "console-read-9a8b7c6d"
MESSAGES_SECRET = "console-messages-1a2b3c"
TOKENS = (
    ApiToken(name="ops-admin", secret=ADMIN_SECRET, scopes=frozenset({ADMIN})),
    ApiToken(name="ops-viewer", secret=READ_SECRET, scopes=frozenset({READ})),
    ApiToken(name="worker", secret=MESSAGES_SECRET, scopes=frozenset({MESSAGES})),
)
SERVER_SECRET = b"k" * 32


def csrf_of(response: httpx.Response) -> str:
    found = CSRF.search(response.text)
    assert found, response.text[:500]
    return found.group(1)


async def form_token(client: Client, path: str = "/console/") -> str:
    response = await client.get(path)
    assert response.status_code == 200, response.text[:500]
    return csrf_of(response)


async def submit(
    client: Client, path: str, data: dict[str, str] | None = None, *, page: str | None = None
) -> httpx.Response:
    """Post a console form the way a browser does: the token from the page it is on (by
    default the queue's page, /console/queues/{id})."""
    token = await form_token(client, page or "/".join(path.split("/")[:4]))
    return await client.post(path, data={"csrf_token": token, **(data or {})})


async def audit(client: Client, action: str, **headers: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/audit-log", params={"action": action}, headers=headers)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def dead_letters(client: Client, queue: str, count: int) -> None:
    """``count`` messages exhausted and moved to the dead letters (max attempts 1)."""
    for n in range(count):
        body = {"payload": f'{{"order": {n}}}', "priority": "HIGH"}
        response = await client.post(f"/v1/queues/{queue}/messages", json=body)
        assert response.status_code == 201
        taken = (await client.post(f"/v1/queues/{queue}/messages/dequeue")).json()
        await client.post(
            f"/v1/queues/{queue}/messages/{taken['id']}/visibility",
            json={"receipt_handle": taken["receipt_handle"], "visibility_timeout_seconds": 0},
        )
    # The next dequeue moves the exhausted ones.
    assert (await client.post(f"/v1/queues/{queue}/messages/dequeue")).status_code == 204
    stats = (await client.get(f"/v1/queues/{queue}")).json()["stats"]
    assert stats["dead_letters"] == count


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    """As a browser sees it: each redirect is an answer of its own."""
    async with AsyncTestClient(app=app) as test_client:
        test_client.follow_redirects = False
        yield test_client


# -- auth off: the console is open --------------------------------------------------------


async def test_every_page_renders(client: Client, new_queue: NewQueue) -> None:
    queue = (await new_queue("orders", max_delivery_attempts=1))["id"]
    await dead_letters(client, queue, 1)
    letter = (await client.get(f"/v1/queues/{queue}/dead-letters")).json()["items"][0]["id"]
    message = (
        await client.post(f"/v1/queues/{queue}/messages", json={"payload": "{}", "priority": "LOW"})
    ).json()["id"]
    for path in (
        "/console/",
        "/console/fragments/overview",
        "/console/queues/new",
        f"/console/queues/{queue}",
        f"/console/queues/{queue}/purge",
        f"/console/queues/{queue}/delete",
        f"/console/queues/{queue}/messages",
        f"/console/queues/{queue}/messages?state=completed",
        f"/console/queues/{queue}/messages/{message}",
        f"/console/queues/{queue}/messages/{message}/delete",
        f"/console/queues/{queue}/messages/delete",
        f"/console/queues/{queue}/groups",
        f"/console/queues/{queue}/dead-letters",
        f"/console/queues/{queue}/dead-letters/{letter}",
        f"/console/queues/{queue}/dead-letters/{letter}/delete",
        f"/console/queues/{queue}/dead-letters/delete",
        f"/console/queues/{queue}/dead-letters/redrive",
        "/console/audit",
        f"/console/audit?queue_id={queue}&action=queue.created",
    ):
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["content-type"].startswith("text/html")
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"
    overview = await client.get("/console/")
    assert "orders" in overview.text
    assert 'data-refresh="/console/fragments/overview"' in overview.text
    fragment = await client.get("/console/fragments/overview")
    assert "<html" not in fragment.text and "orders" in fragment.text
    # The dead letter's JSON payload is pretty-printed.
    detail = await client.get(f"/console/queues/{queue}/dead-letters/{letter}")
    assert "{\n  &#34;order&#34;: 0\n}" in detail.text
    css = await client.get("/console/static/console.css")
    assert css.status_code == 200 and "prefers-color-scheme: dark" in css.text


async def test_pause_and_resume_go_through_the_use_cases(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue())["id"]
    response = await submit(client, f"/console/queues/{queue}/pause")
    assert response.status_code == 303
    assert response.headers["location"] == f"/console/queues/{queue}?notice=paused"
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is True
    page = await client.get(response.headers["location"])
    assert "Queue paused" in page.text and ">Resume<" in page.text

    response = await submit(client, f"/console/queues/{queue}/resume")
    assert response.status_code == 303
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is False
    paused = await audit(client, "queue.paused")
    assert [(e["actor"], e["target_id"]) for e in paused] == [("anonymous", queue)]
    assert paused[0]["request_id"]
    assert len(await audit(client, "queue.resumed")) == 1


async def test_settings_errors_show_next_to_their_field(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue())["id"]
    page = f"/console/queues/{queue}"
    response = await submit(
        client,
        f"{page}/settings",
        {
            "visibility_timeout_seconds": "0",
            "max_delivery_attempts": "five",
            "default_message_ttl_seconds": "604800",
        },
        page=page,
    )
    assert response.status_code == 400
    text = response.text
    assert 'data-code="invalid_visibility_timeout"' in text
    assert "visibility_timeout_seconds must be between 1 and 21600, got 0." in text
    assert 'data-code="invalid_max_delivery_attempts"' in text
    assert 'value="five"' in text  # what was typed stays in the form
    assert (await client.get(f"/v1/queues/{queue}")).json()["visibility_timeout_seconds"] == 30
    assert await audit(client, "queue.updated") == []

    response = await submit(
        client,
        f"{page}/settings",
        {
            "visibility_timeout_seconds": "120",
            "max_delivery_attempts": "5",
            "default_message_ttl_seconds": "604800",
        },
        page=page,
    )
    assert response.status_code == 303
    queue_now = (await client.get(f"/v1/queues/{queue}")).json()
    assert queue_now["visibility_timeout_seconds"] == 120
    updated = await audit(client, "queue.updated")
    # Only what changed is sent to the use case (and recorded).
    assert updated[0]["details"] == {"changes": {"visibility_timeout_seconds": 120}}

    response = await submit(
        client,
        f"{page}/settings",
        {
            "visibility_timeout_seconds": "120",
            "max_delivery_attempts": "5",
            "default_message_ttl_seconds": "604800",
        },
        page=page,
    )
    assert response.headers["location"].endswith("notice=unchanged")


async def test_purge_needs_the_queue_name_and_shows_the_live_count(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("billing"))["id"]
    for n in range(3):
        body = {"payload": str(n), "priority": "LOW"}
        await client.post(f"/v1/queues/{queue}/messages", json=body)
    confirm = await client.get(f"/console/queues/{queue}/purge")
    assert "<strong data-live-count>3</strong>" in confirm.text

    token = csrf_of(confirm)
    response = await client.post(
        f"/console/queues/{queue}/purge", data={"csrf_token": token, "confirm_name": "billin"}
    )
    assert response.status_code == 400
    assert "Nothing was purged" in response.text
    assert (await client.get(f"/v1/queues/{queue}")).json()["stats"]["ready"] == 3

    response = await client.post(
        f"/console/queues/{queue}/purge", data={"csrf_token": token, "confirm_name": "billing"}
    )
    assert response.status_code == 303
    assert response.headers["location"].endswith("notice=purged&n=3")
    assert (await client.get(f"/v1/queues/{queue}")).json()["stats"]["ready"] == 0
    assert (await client.get(response.headers["location"])).text.count("Purged 3 messages") == 1
    assert len(await audit(client, "queue.purged")) == 1


async def test_dead_letters_redrive_one_bulk_and_delete(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("mail", max_delivery_attempts=1))["id"]
    await dead_letters(client, queue, 5)
    page = f"/console/queues/{queue}/dead-letters"
    letters = [d["id"] for d in (await client.get(f"/v1/{page[9:]}")).json()["items"]]

    # Redrive one is one click (nothing is lost); delete one asks first.
    response = await submit(client, f"{page}/{letters[0]}/redrive", page=f"{page}/{letters[0]}")
    assert response.status_code == 303
    confirm = await client.get(f"{page}/{letters[1]}/delete")
    assert "<strong data-confirm-count>1</strong> dead letter" in confirm.text
    assert (await client.get(f"/v1/queues/{queue}")).json()["stats"]["dead_letters"] == 4
    response = await client.post(
        f"{page}/{letters[1]}/delete", data={"csrf_token": csrf_of(confirm)}
    )
    assert response.status_code == 303

    # Bulk redrive: a confirmation with the dry run's count, the limit judged by the use case.
    refused = await client.get(f"{page}/redrive", params={"limit": "0"})
    assert refused.status_code == 400
    assert 'data-code="invalid_limit"' in refused.text
    assert "limit must be between 1 and 1000, got 0." in refused.text
    confirm = await client.get(f"{page}/redrive", params={"limit": "2"})
    assert confirm.status_code == 200
    assert '<strong class="confirm-count" data-confirm-count>2</strong>' in confirm.text
    assert await audit(client, "dead_letter.redriven") != []  # the single one only
    assert len(await audit(client, "dead_letter.redriven")) == 1  # a dry run is no action
    response = await client.post(
        f"{page}/redrive", data={"csrf_token": csrf_of(confirm), "limit": "2"}
    )
    assert response.headers["location"].endswith("notice=redriven_many&n=2&of=2")

    stats = (await client.get(f"/v1/queues/{queue}")).json()["stats"]
    assert (stats["dead_letters"], stats["ready"]) == (1, 3)
    redriven = await audit(client, "dead_letter.redriven")
    assert len(redriven) == 2  # one single, one bulk
    assert [e["target_id"] for e in await audit(client, "dead_letter.deleted")] == [letters[1]]

    # A record that is gone: the use case's 404, as a page.
    response = await submit(client, f"{page}/{letters[1]}/delete", page=f"{page}/{letters[2]}")
    assert response.status_code == 404
    assert "dead_letter_not_found" in response.text


async def test_the_message_browser_filters_pages_shows_and_deletes(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue("browse"))["id"]
    for n, priority in enumerate(("HIGH", "LOW", "HIGH", "MEDIUM")):
        body = {"payload": f'{{"n": {n}, "tags": ["a", "b"]}}', "priority": priority}
        await client.post(f"/v1/queues/{queue}/messages", json=body)
    await client.post(
        f"/v1/queues/{queue}/messages",
        json={"payload": "later", "priority": "LOW", "delay_seconds": 600},
    )
    await client.post(f"/v1/queues/{queue}/messages/dequeue")  # the first HIGH: in flight

    base = f"/console/queues/{queue}/messages"
    every = await client.get(base)
    assert every.status_code == 200
    assert every.text.count('class="payload"') == 5
    ready_high = await client.get(base, params={"state": "ready", "priority": "HIGH"})
    assert ready_high.text.count('class="payload"') == 1
    assert "&#34;n&#34;: 2" in ready_high.text
    delayed = await client.get(base, params={"state": "delayed"})
    assert delayed.text.count('class="payload"') == 1 and ">later<" in delayed.text
    assert (await client.get(base, params={"state": "gone"})).status_code == 400
    assert "invalid_state" in (await client.get(base, params={"state": "gone"})).text

    listed = (await client.get(f"/v1/queues/{queue}/messages?state=ready")).json()["items"]
    target = listed[0]["id"]
    detail = await client.get(f"{base}/{target}")
    assert detail.status_code == 200
    assert "{\n  &#34;n&#34;: 2,\n  &#34;tags&#34;: [\n    &#34;a&#34;," in detail.text

    back = f"{base}?state=ready"
    # Delete asks first, naming the message; the list links to that page, not to the action.
    listed_page = await client.get(back)
    assert f'href="{base}/{target}/delete?back=' in listed_page.text
    confirm = await client.get(f"{base}/{target}/delete", params={"back": back})
    assert confirm.status_code == 200
    assert (
        "<strong data-confirm-count>1</strong> message" in confirm.text and target in confirm.text
    )
    assert (await client.get(f"/v1/queues/{queue}/messages/{target}")).status_code == 200
    response = await client.post(
        f"{base}/{target}/delete", data={"csrf_token": csrf_of(confirm), "back": back}
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"{back}&notice=message_deleted"
    gone = await client.get(f"/v1/queues/{queue}/messages/{target}")
    assert gone.status_code == 404 and gone.json()["code"] == "message_not_found"
    deleted = await audit(client, "message.deleted")
    assert [(e["target_id"], e["actor"]) for e in deleted] == [(target, "anonymous")]
    # The back link cannot lead elsewhere.
    other = listed[1]["id"]
    confirm_page = f"{base}/{other}/delete"
    response = await submit(
        client, confirm_page, {"back": "https://evil.example/"}, page=confirm_page
    )
    assert response.headers["location"] == f"{base}?notice=message_deleted"
    response = await submit(client, confirm_page, page=f"{base}/{listed[2]['id']}/delete")
    assert response.status_code == 404 and "message_not_found" in response.text


async def test_consumers_health_and_history_charts(
    client: Client,
    new_queue: NewQueue,
    container: ApiContainer,
    repository: MemoryStorage,
    clock: ManualClock,
) -> None:
    queue = (await new_queue("reports"))["id"]
    messages = f"/v1/queues/{queue}/messages"
    await _snapshot(repository)
    clock.advance(15)
    for n in range(3):
        await client.post(messages, json={"payload": str(n), "priority": "HIGH"})
    headers = {"retsu-consumer": "reporter-1"}
    taken = (await client.post(f"{messages}/dequeue", headers=headers)).json()
    await client.post(
        f"{messages}/{taken['id']}/acknowledge", json={"receipt_handle": taken["receipt_handle"]}
    )
    await container.use_cases.consumer_tracker().flush()
    await _snapshot(repository)

    listed = await client.get("/console/consumers")
    assert listed.status_code == 200
    assert "reporter-1" in listed.text and '<span class="badge ok">healthy</span>' in listed.text
    overview = await client.get("/console/fragments/overview")
    cells = re.findall(
        r'<td class="num[^"]*"><a href="/console/consumers[^>]*>(\d+)</a>', overview.text
    )
    assert cells == ["1"]
    assert overview.text.count('<svg class="spark"') == 2
    for window in ("1h", "nonsense"):
        page = await client.get(f"/console/queues/{queue}", params={"window": window})
        assert page.status_code == 200
        assert page.text.count('<svg class="chart"') == 2
        assert 'class="series s-enqueued"' in page.text
        # 15 s of history: the axis spans those 15 s (seconds shown), not an empty hour.
        assert "the 15 s this queue has history for, of the 1 h window" in page.text
        assert '<text x="46.0" y="184" text-anchor="start">00:00:00</text>' in page.text
    for window in ("24h", "7d"):
        # Both snapshots fall in one point of these windows: nothing to draw a line with.
        page = await client.get(f"/console/queues/{queue}", params={"window": window})
        assert page.status_code == 200
        assert '<svg class="chart"' not in page.text
        assert "Collecting… one point so far in this window" in page.text
    clock.advance(400)
    offline = await client.get("/console/consumers", params={"health": "offline"})
    assert '<span class="badge danger">offline</span>' in offline.text
    assert "reporter-1" not in (await client.get("/console/consumers?health=healthy")).text
    bad = await client.get("/console/consumers", params={"health": "sleepy"})
    assert bad.status_code == 400 and "invalid_health" in bad.text


async def _snapshot(repository: MemoryStorage) -> None:
    session = await InMemoryLeadership(InMemoryLock(), repository).try_acquire()
    assert session is not None
    await session.record_history(await session.read_state())
    await session.release()


async def test_unknown_things_are_pages_with_the_api_codes(client: Client) -> None:
    response = await client.get(f"/console/queues/{MISSING_ID}")
    assert response.status_code == 404 and "queue_not_found" in response.text
    assert response.headers["content-type"].startswith("text/html")
    response = await client.get("/console/queues/not-a-uuid")
    assert response.status_code == 400 and "invalid_path" in response.text
    response = await client.get("/console/audit?action=queue.exploded")
    assert response.status_code == 400 and "invalid_action" in response.text
    response = await client.get("/console/audit?cursor=nope")
    assert response.status_code == 400 and "invalid_cursor" in response.text


async def test_a_deeply_nested_payload_is_shown_as_text(
    client: Client, new_queue: NewQueue
) -> None:
    """Anyone who may enqueue can plant one: JSON nested ~990 levels made the pretty-printer
    raise RecursionError (a 500 on the message and dead-letter pages)."""
    queue = (await new_queue("nested", max_delivery_attempts=1))["id"]
    nested = "[" * 990 + "]" * 990
    deep = {"payload": nested, "priority": "HIGH"}
    message = (await client.post(f"/v1/queues/{queue}/messages", json=deep)).json()["id"]
    for path in (f"/console/queues/{queue}/messages/{message}", f"/console/queues/{queue}"):
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
    detail = await client.get(f"/console/queues/{queue}/messages/{message}")
    assert f'<pre class="json" data-payload>{nested}</pre>' in detail.text
    assert "JSON, pretty-printed" not in detail.text
    # The same payload as a dead letter.
    taken = (await client.post(f"/v1/queues/{queue}/messages/dequeue")).json()
    await client.post(
        f"/v1/queues/{queue}/messages/{taken['id']}/visibility",
        json={"receipt_handle": taken["receipt_handle"], "visibility_timeout_seconds": 0},
    )
    assert (await client.post(f"/v1/queues/{queue}/messages/dequeue")).status_code == 204
    letter = (await client.get(f"/v1/queues/{queue}/dead-letters")).json()["items"][0]["id"]
    assert (await client.get(f"/console/queues/{queue}/dead-letters")).status_code == 200
    detail = await client.get(f"/console/queues/{queue}/dead-letters/{letter}")
    assert detail.status_code == 200, detail.text[:300]
    assert f'<pre class="json" data-payload>{nested}</pre>' in detail.text


@pytest.mark.parametrize(
    "path",
    [
        "/console/static/%00",
        "/console/static/\x00",
        "/console/static/a\x00b.css",
        "/console/static/" + "a" * 5000,
        "/console/static/" + "a/" * 3000 + "x.css",
        "/console/static/..",
        "/console/static/../__init__.py",
        "/console/static/../../../../../../etc/passwd",
        "/console/static//etc/passwd",
        "/console/static/console.css/..",
        "/console/static/console.css/x",
        "/console/static/%ff.css",
        "/console/static/\udcff.css",
        "/console/static/nope.css",
    ],
)
@pytest.mark.parametrize("auth", [False, True])
async def test_odd_static_paths_are_404_without_sign_in(
    container: ApiContainer, path: str, auth: bool
) -> None:
    """Sent as the ASGI path itself (an HTTP client would normalise ``..``): never a 500,
    never a file outside the static folder."""
    if auth:
        container.auth.override(providers.Object(AuthConfig(enabled=True, tokens=TOKENS)))
    app = container.app()
    raw = path.encode("utf-8", "surrogateescape")
    status, headers, body = await raw_request(app, "GET", raw.decode("latin-1"), [], [])
    assert status == 404, (path, body[:300])
    assert headers[b"content-type"] == PROBLEM.encode(), body[:300]
    assert b"not_found" in body
    status, _, _ = await raw_request(app, "HEAD", raw.decode("latin-1"), [], [])
    assert status == 404, path


async def test_an_unreachable_database_is_a_503_page_with_retry_after(
    container: ApiContainer, clock: ManualClock
) -> None:
    class Unreachable(MemoryStorage):
        async def list_queues(self, *args: Any, **kwargs: Any) -> Any:
            raise DatabaseUnavailable()

    for port in STORAGE_PORTS:
        getattr(container.storage, port).override(providers.Object(Unreachable(clock)))
    async with AsyncTestClient(app=container.app()) as client:
        response = await client.get("/console/")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"].startswith("text/html")
    assert "database_unavailable" in response.text


async def test_a_form_without_its_csrf_token_changes_nothing(
    client: Client, new_queue: NewQueue
) -> None:
    queue = (await new_queue())["id"]
    page = f"/console/queues/{queue}"
    await client.get(page)  # a session cookie, but no token in the form
    for data in ({}, {"csrf_token": "forged"}, {"csrf_token": ""}):
        response = await client.post(f"/console/queues/{queue}/pause", data=data)
        assert response.status_code == 403, data
        assert "could not be verified" in response.text
    # A token from another session (a replayed form) does not fit this one.
    mine = client.cookies[COOKIE_NAME]
    client.cookies.clear()
    foreign = await form_token(client, page)
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, mine, path="/console")
    response = await client.post(f"/console/queues/{queue}/pause", data={"csrf_token": foreign})
    assert response.status_code == 403
    # A valid token without its cookie: what a cross-site form sends (SameSite=Strict).
    token = await form_token(client, page)
    client.cookies.clear()
    response = await client.post(f"/console/queues/{queue}/pause", data={"csrf_token": token})
    assert response.status_code == 403
    assert (await client.get(f"/v1/queues/{queue}")).json()["paused"] is False
    assert await audit(client, "queue.paused") == []


async def test_the_console_can_be_switched_off(container: ApiContainer) -> None:
    container.console.override(
        providers.Factory(
            type(container.console()),
            enabled=False,
            secrets=RandomServerSecrets(),
            auth=AuthConfig(),
        )
    )
    async with AsyncTestClient(app=container.app()) as off:
        assert (await off.get("/console/")).status_code == 404
        assert (await off.get("/console/static/console.css")).status_code == 404
        assert (await off.get("/v1/queues")).status_code == 200


# -- auth on: sessions and scopes -----------------------------------------------------------


@pytest.fixture
async def auth_client(container: ApiContainer) -> AsyncIterator[Client]:
    container.auth.override(providers.Object(AuthConfig(enabled=True, tokens=TOKENS)))
    container.storage.secrets.override(providers.Object(RandomServerSecrets(SERVER_SECRET)))
    async with AsyncTestClient(app=container.app()) as client:
        client.follow_redirects = False
        yield client


AS_ADMIN = {"authorization": f"Bearer {ADMIN_SECRET}"}


async def sign_in(client: Client, secret: str, next_path: str = "/console/") -> httpx.Response:
    page = await client.get("/console/sign-in", params={"next": next_path})
    assert page.status_code == 200
    return await client.post(
        "/console/sign-in",
        data={"csrf_token": csrf_of(page), "token": secret, "next": next_path},
    )


def session_cookie(response: httpx.Response) -> str:
    header = next(
        h for h in response.headers.get_list("set-cookie") if h.startswith(COOKIE_NAME + "=")
    )
    return header


async def test_signing_in_and_out(auth_client: Client) -> None:
    client = auth_client
    response = await client.get("/console/audit?action=queue.paused")
    assert response.status_code == 303
    assert response.headers["location"] == (
        "/console/sign-in?next=%2Fconsole%2Faudit%3Faction%3Dqueue.paused"
    )
    response = await sign_in(client, "wrong-secret")
    assert response.status_code == 401 and "That token is not valid." in response.text
    response = await sign_in(client, MESSAGES_SECRET)
    assert response.status_code == 403 and "neither the admin nor the read scope" in response.text

    response = await sign_in(client, ADMIN_SECRET, "/console/audit")
    assert response.status_code == 303 and response.headers["location"] == "/console/audit"
    cookie = session_cookie(response).lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    assert f"max-age={SESSION_IDLE_SECONDS}" in cookie
    assert "secure" not in cookie  # plain HTTP here; Secure behind HTTPS
    page = await client.get("/console/")
    assert page.status_code == 200 and "ops-admin" in page.text
    assert ADMIN_SECRET not in page.text

    response = await client.post("/console/sign-out", data={"csrf_token": csrf_of(page)})
    assert response.status_code == 303
    assert (await client.get("/console/")).status_code == 303


async def test_an_open_redirect_is_not_offered(auth_client: Client) -> None:
    for target in ("https://evil.example/", "//evil.example/", "/console/\\evil", "/v1/queues"):
        auth_client.cookies.clear()
        response = await sign_in(auth_client, ADMIN_SECRET, target)
        assert response.headers["location"] == "/console/", target


async def test_the_token_name_is_the_audit_actor(auth_client: Client) -> None:
    client = auth_client
    queue = (await client.post("/v1/queues", json={"name": "q"}, headers=AS_ADMIN)).json()["id"]
    await sign_in(client, ADMIN_SECRET)
    response = await submit(client, f"/console/queues/{queue}/pause")
    assert response.status_code == 303
    paused = await audit(client, "queue.paused", **AS_ADMIN)
    assert [e["actor"] for e in paused] == ["ops-admin"]


async def test_a_read_session_sees_everything_and_changes_nothing(auth_client: Client) -> None:
    client = auth_client
    queue = (await client.post("/v1/queues", json={"name": "q"}, headers=AS_ADMIN)).json()["id"]
    await sign_in(client, READ_SECRET)
    page = await client.get(f"/console/queues/{queue}")
    assert page.status_code == 200
    assert "Read only." in page.text
    assert 'disabled aria-disabled="true" title="Token “ops-viewer” has the read scope' in page.text
    assert (await client.get("/console/audit")).status_code == 200
    token = csrf_of(page)
    # The way to every destructive action is a disabled button saying why, never a link.
    for path in ("/purge", "/delete"):
        assert f'href="/console/queues/{queue}{path}"' not in page.text
    overview = await client.get("/console/")
    assert 'href="/console/queues/new"' not in overview.text
    assert 'disabled aria-disabled="true" title="Token “ops-viewer”' in overview.text
    letters = await client.get(f"/console/queues/{queue}/dead-letters")
    assert letters.text.count('disabled aria-disabled="true"') >= 2  # redrive / delete matching
    for path, data in (
        (f"/console/queues/{queue}/pause", {}),
        (f"/console/queues/{queue}/messages/{MISSING_ID}/delete", {}),
        (f"/console/queues/{queue}/purge", {"confirm_name": "q"}),
        (f"/console/queues/{queue}/delete", {"confirm_name": "q"}),
        (f"/console/queues/{queue}/settings", {"visibility_timeout_seconds": "9"}),
        (f"/console/queues/{queue}/settings", {"max_in_flight": ""}),
        (f"/console/queues/{queue}/dead-letters/redrive", {"limit": "5"}),
        (f"/console/queues/{queue}/dead-letters/delete", {"limit": "5"}),
        (f"/console/queues/{queue}/messages/delete", {"limit": "5"}),
        ("/console/queues", {"name": "sneaky"}),
    ):
        response = await client.post(path, data={"csrf_token": token, **data})
        assert response.status_code == 403, path
        assert "may look at everything but change nothing" in response.text
    found = (await client.get(f"/v1/queues/{queue}", headers=AS_ADMIN)).json()
    assert found["paused"] is False and found["visibility_timeout_seconds"] == 30
    named = await client.get("/v1/queues", params={"name": "sneaky"}, headers=AS_ADMIN)
    assert named.json()["items"] == []
    entries = (await client.get("/v1/audit-log", headers=AS_ADMIN)).json()["items"]
    assert [e["action"] for e in entries] == ["queue.created"]


def _forged_cookie(payload: dict[str, Any], *, age_seconds: float = 0) -> str:
    return forge_cookie(SERVER_SECRET, payload, age_seconds=age_seconds)


async def test_an_expired_or_tampered_cookie_is_refused(auth_client: Client) -> None:
    client = auth_client
    queue = (await client.post("/v1/queues", json={"name": "q"}, headers=AS_ADMIN)).json()["id"]
    response = await sign_in(client, ADMIN_SECRET)
    good = client.cookies[COOKIE_NAME]
    session = await client.get("/console/")
    token = csrf_of(session)
    sid_payload = _session_payload(good)

    idle = _forged_cookie(sid_payload, age_seconds=SESSION_IDLE_SECONDS + 5)
    too_old = _forged_cookie({**sid_payload, "at": int(time.time()) - SESSION_MAX_AGE_SECONDS - 5})
    fresh = _forged_cookie(sid_payload)
    tampered = good[:-2] + ("AA" if not good.endswith("AA") else "BB")
    other_name = _forged_cookie({**sid_payload, "tok": "ops-viewer"})
    for cookie in (idle, too_old, tampered, other_name):
        client.cookies.clear()
        client.cookies.set(COOKIE_NAME, cookie, path="/console")
        page = await client.get("/console/")
        assert page.status_code == 303, cookie
        assert page.headers["location"].startswith("/console/sign-in")
        response = await client.post(f"/console/queues/{queue}/pause", data={"csrf_token": token})
        assert response.status_code in (401, 403), cookie
    # The same payload, signed now with the right key, is accepted: the test forges right.
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, fresh, path="/console")
    assert (await client.get("/console/")).status_code == 200
    # A session in use gets a fresh cookie (its idle clock restarted), at most once a minute.
    renewed = _forged_cookie(sid_payload, age_seconds=120)
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, renewed, path="/console")
    response = await client.get("/console/")
    assert response.status_code == 200
    value = session_cookie(response).split(";")[0].split("=", 1)[1]
    assert value != renewed and _session_payload(value) == sid_payload
    client.cookies.clear()
    client.cookies.set(COOKIE_NAME, value, path="/console")
    assert "set-cookie" not in (await client.get("/console/")).headers
    assert (await client.get(f"/v1/queues/{queue}", headers=AS_ADMIN)).json()["paused"] is False


def _session_payload(cookie: str) -> dict[str, Any]:
    return read_cookie(SERVER_SECRET, cookie)


class CountingStorage(MemoryStorage):
    """The memory twin, counting every storage read the console's pages make."""

    READS = (
        "list_queues",
        "get_queue",
        "read_state",
        "read_states",
        "read_history",
        "read_histories",
        "list_consumers",
        "count_consumers",
    )

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.reads: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name in CountingStorage.READS:
            object.__getattribute__(self, "reads").append(name)
        return object.__getattribute__(self, name)


@pytest.mark.parametrize("queues", [1, 30])
async def test_the_overview_reads_storage_a_bounded_number_of_times_per_refresh(
    container: ApiContainer, clock: ManualClock, queues: int
) -> None:
    storage = CountingStorage(clock)
    for port in STORAGE_PORTS:
        getattr(container.storage, port).override(providers.Object(storage))
    async with AsyncTestClient(app=container.app()) as client:
        for index in range(queues):
            created = await client.post("/v1/queues", json={"name": f"q-{index:03}"})
            assert created.status_code == 201
        storage.reads.clear()
        response = await client.get("/console/fragments/overview")
        assert response.status_code == 200
        assert response.text.count('href="/console/queues/') >= queues
    # One page of queues, their states, their healthy consumers, their histories: four
    # reads whatever the page holds (it was 2 + 2 per queue, every 5 s per open tab).
    assert sorted(storage.reads) == [
        "count_consumers",
        "list_queues",
        "read_histories",
        "read_states",
    ]
