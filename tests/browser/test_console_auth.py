"""The console with auth on, in headless Chromium against a real `retsu api`: signing in and
out with each scope, the session cookie's flags, the token name as the audit actor, a
`read` session that sees everything and changes nothing; and the security checks against
the same server — a forged or replayed form without the session's CSRF token, an expired
or tampered cookie and a read session are refused and change nothing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from retsu.adapters.postgres.hosts import libpq_url
from tests.browser.conftest import ConsoleServer, screenshot, start_server
from tests.support.browser import click_and_wait
from tests.support.console_cookies import forge_cookie, read_cookie

pytestmark = pytest.mark.integration

Driver = webdriver.Chrome

ADMIN_SECRET = "console-admin-7d1c5e9a3b2f"
READ_SECRET = "console-read-2e6a9c1f4d8b"
MESSAGES_SECRET = "console-messages-5b3d7f1a9c"
TOKENS = [
    {"name": "ops-admin", "secret": ADMIN_SECRET, "scopes": ["admin"]},
    {"name": "ops-viewer", "secret": READ_SECRET, "scopes": ["read"]},
    {"name": "billing-worker", "secret": MESSAGES_SECRET, "scopes": ["messages"]},
]
AS_ADMIN = {"authorization": f"Bearer {ADMIN_SECRET}"}
COOKIE = "retsu_console"


@pytest.fixture(scope="module")
def server(
    console_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleServer]:
    started = start_server(
        console_database, Path(tmp_path_factory.mktemp("console-auth")), tokens=TOKENS
    )
    started.headers = AS_ADMIN
    try:
        yield started
    finally:
        assert started.process.stop() == 0, started.process.output()
        for token in TOKENS:
            assert token["secret"] not in started.process.output()


@pytest.fixture(scope="module")
async def queue(server: ConsoleServer) -> AsyncIterator[str]:
    async with server.api() as api:
        response = await api.post("/v1/queues", json={"name": "invoices"})
        assert response.status_code == 201, response.text
        queue_id = str(response.json()["id"])
        for n in range(3):
            body = {"payload": f'{{"invoice": {n}}}', "priority": "MEDIUM"}
            await api.post(f"/v1/queues/{queue_id}/messages", json=body)
        yield queue_id


@pytest.fixture(scope="module")
async def server_secret(console_database: str) -> bytes:
    """The key `retsu migrate` stored: what the console's session key derives from."""
    connection = await asyncpg.connect(libpq_url(console_database))
    try:
        value = await connection.fetchval(
            "SELECT value FROM server_secret WHERE name = 'cursor_signing_key'"
        )
    finally:
        await connection.close()
    return bytes(value)


@pytest.fixture
def page(browser: Driver, server: ConsoleServer) -> Iterator[Driver]:
    browser.get(server.url("/console/static/console.css"))
    browser.delete_all_cookies()
    yield browser
    browser.delete_all_cookies()


def _click(driver: Driver, selector: str) -> None:
    click_and_wait(driver, selector)


def _sign_in(driver: Driver, secret: str) -> None:
    driver.find_element(By.ID, "token").send_keys(secret)
    _click(driver, 'form[action="/console/sign-in"] button')


async def _queue(server: ConsoleServer, queue: str) -> dict[str, Any]:
    async with server.api() as api:
        body: dict[str, Any] = (await api.get(f"/v1/queues/{queue}")).json()
        return body


async def _audit(server: ConsoleServer, **params: str) -> list[dict[str, Any]]:
    async with server.api() as api:
        response = await api.get("/v1/audit-log", params=params)
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items


async def test_sign_in_and_out_with_each_scope(
    page: Driver, server: ConsoleServer, queue: str
) -> None:
    page.get(server.url(f"/console/queues/{queue}"))
    assert page.current_url.startswith(server.url("/console/sign-in?next="))
    screenshot(page, "sign-in")

    _sign_in(page, "not-a-token")
    assert page.find_element(By.CLASS_NAME, "alert").text == "That token is not valid."
    _sign_in(page, MESSAGES_SECRET)
    assert "neither the admin nor the read scope" in page.find_element(By.CLASS_NAME, "alert").text
    assert page.get_cookie(COOKIE) is not None  # the anonymous one only

    # admin: back where it was going, allowed to change things, named in the audit log.
    _sign_in(page, ADMIN_SECRET)
    assert page.current_url == server.url(f"/console/queues/{queue}")
    cookie = page.get_cookie(COOKIE)
    assert cookie is not None
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/console" and cookie["secure"] is False  # plain HTTP here
    assert "ops-admin" in page.find_element(By.CLASS_NAME, "who").text
    _click(page, 'form[action$="/pause"] button')
    assert (await _queue(server, queue))["paused"] is True
    _click(page, 'form[action$="/resume"] button')
    paused = await _audit(server, queue_id=queue, action="queue.paused")
    assert [e["actor"] for e in paused] == ["ops-admin"]
    _click(page, 'form[action="/console/sign-out"] button')
    assert page.current_url == server.url("/console/sign-in?notice=signed_out")
    assert page.find_element(By.CLASS_NAME, "notice").text == "Signed out."
    page.get(server.url("/console/"))
    assert page.current_url.startswith(server.url("/console/sign-in"))

    # read: every page, no change; the buttons say why.
    _sign_in(page, READ_SECRET)
    page.get(server.url(f"/console/queues/{queue}"))
    banner = page.find_element(By.CLASS_NAME, "readonly").text
    assert "Token “ops-viewer” has the read scope" in banner
    pause = page.find_element(By.CSS_SELECTOR, 'form[action$="/pause"] button')
    assert pause.get_attribute("disabled") is not None
    assert "may look at everything but change nothing" in pause.get_attribute("title")
    screenshot(page, "queue-read-only")
    for path in ("/messages", "/dead-letters", "/purge"):
        page.get(server.url(f"/console/queues/{queue}{path}"))
        assert page.find_element(By.TAG_NAME, "h1").text.startswith("invoices"), path
    page.get(server.url("/console/audit"))
    assert "ops-admin" in page.find_element(By.TAG_NAME, "tbody").text
    # Force the disabled button and submit anyway: the server says no.
    page.get(server.url(f"/console/queues/{queue}"))
    page.execute_script(
        "document.querySelector('form[action$=\"/pause\"] button').removeAttribute('disabled')"
    )
    _click(page, 'form[action$="/pause"] button')
    assert page.find_element(By.TAG_NAME, "h1").text == "Read only"
    assert (await _queue(server, queue))["paused"] is False
    _click(page, 'form[action="/console/sign-out"] button')
    assert page.get_cookie(COOKIE) is not None
    page.get(server.url("/console/audit"))
    assert page.current_url.startswith(server.url("/console/sign-in"))


def _csrf(html: str) -> str:
    marker = 'name="csrf_token" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


async def _sign_in_as(client: httpx.AsyncClient, secret: str, path: str) -> str:
    """Sign a plain HTTP client in; returns a form token of its session from ``path``."""
    page = await client.get("/console/sign-in")
    await client.post("/console/sign-in", data={"csrf_token": _csrf(page.text), "token": secret})
    page = await client.get(path)
    assert page.status_code == 200, page.text[:300]
    return _csrf(page.text)


async def test_forged_replayed_expired_tampered_and_read_only_posts_change_nothing(
    server: ConsoleServer, queue: str, server_secret: bytes
) -> None:
    before = await _audit(server, queue_id=queue)
    pause = f"/console/queues/{queue}/pause"
    purge = f"/console/queues/{queue}/purge"
    admin = httpx.AsyncClient(base_url=server.base_url, timeout=30)
    viewer = httpx.AsyncClient(base_url=server.base_url, timeout=30)
    anonymous = httpx.AsyncClient(base_url=server.base_url, timeout=30)
    async with admin, viewer, anonymous:
        admin_token = await _sign_in_as(admin, ADMIN_SECRET, f"/console/queues/{queue}")
        viewer_token = await _sign_in_as(viewer, READ_SECRET, f"/console/queues/{queue}")
        refused: list[httpx.Response] = []
        # Forged: no token, a made-up one, and a form posted with no cookie at all (what a
        # cross-site form sends: SameSite=Strict keeps the cookie home).
        refused.append(await admin.post(pause))
        refused.append(await admin.post(pause, data={"csrf_token": "0" * 27}))
        refused.append(await anonymous.post(pause, data={"csrf_token": admin_token}))
        # Replayed: another session's genuine form, token included, on this session.
        refused.append(await admin.post(pause, data={"csrf_token": viewer_token}))
        # A read session with its own valid token.
        refused.append(await viewer.post(pause, data={"csrf_token": viewer_token}))
        refused.append(
            await viewer.post(purge, data={"csrf_token": viewer_token, "confirm_name": "invoices"})
        )
        # Expired (idle too long, or signed in too long ago) and tampered cookies.
        payload = read_cookie(server_secret, admin.cookies[COOKIE])
        now = int(time.time())
        cookies = {
            "idle": forge_cookie(server_secret, payload, age_seconds=31 * 60),
            "too old": forge_cookie(server_secret, {**payload, "at": now - 9 * 3600}),
            "tampered": admin.cookies[COOKIE][:-3] + "xyz",
            "other name": forge_cookie(server_secret, {**payload, "tok": "ops-viewer"}),
            "wrong key": forge_cookie(b"not-the-server-secret-0123456789", payload),
        }
        for name, value in cookies.items():
            async with httpx.AsyncClient(
                base_url=server.base_url, timeout=30, cookies={COOKIE: value}
            ) as stolen:
                response = await stolen.get(f"/console/queues/{queue}")
                assert response.status_code == 303, name
                assert response.headers["location"].startswith("/console/sign-in"), name
                refused.append(await stolen.post(pause, data={"csrf_token": admin_token}))
        for response in refused:
            assert response.status_code in (401, 403), response.text[:300]
            assert response.headers["content-type"].startswith("text/html")
            assert "Nothing was changed" in response.text

        # The same admin session with its own token does work: the refusals were the checks.
        assert (await _queue(server, queue))["paused"] is False
        assert await _audit(server, queue_id=queue) == before
        response = await admin.post(pause, data={"csrf_token": admin_token})
        assert response.status_code == 303
        assert (await _queue(server, queue))["paused"] is True
        resumed = await admin.post(
            f"/console/queues/{queue}/resume", data={"csrf_token": admin_token}
        )
        assert resumed.status_code == 303
