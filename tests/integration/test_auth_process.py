"""Bearer-token auth end to end: a real `retsu api` with auth on, debug JSON logs, and no
secret in the process output."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import create_database, drop_database
from tests.support.processes import RetsuProcess, free_port, retsu_env
from tests.support.services import PostgresServer

pytestmark = pytest.mark.integration

ADMIN_SECRET = "adm1n-s3cret-9c2f7e51a8d34b60"
MESSAGES_SECRET = "m3ssages-s3cret-4e8a1b7c2d9f0356"
WRONG_SECRET = "wr0ng-s3cret-b1d4f7a0c3e6"
SECRETS = (ADMIN_SECRET, MESSAGES_SECRET, WRONG_SECRET)

TOKENS = [
    {"name": "ops-admin", "secret": ADMIN_SECRET, "scopes": ["admin"]},
    {"name": "billing-consumer", "secret": MESSAGES_SECRET, "scopes": ["messages"]},
]
AS_ADMIN = {"authorization": f"Bearer {ADMIN_SECRET}"}
AS_MESSAGES = {"authorization": f"Bearer {MESSAGES_SECRET}"}


@pytest.fixture(scope="module")
async def auth_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture(scope="module")
def api(auth_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RetsuProcess]:
    port = free_port()
    env = retsu_env(
        auth_database,
        http__port=str(port),
        auth__enabled="true",
        auth__tokens=json.dumps(TOKENS),
        logging__filter="debug",
        logging__format="json",
    )
    process = RetsuProcess(["api"], env, Path(tmp_path_factory.mktemp("auth")) / "api.log")
    process.base_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    try:
        process.wait_until_ready(f"{process.base_url}/health/ready")  # type: ignore[attr-defined]
        yield process
    finally:
        code = process.stop()
        output = process.log_path.read_text()
        assert code == 0, output
        for secret in SECRETS:
            assert secret not in output, "a token secret reached the process output"


@pytest.fixture
async def client(api: RetsuProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as http:  # type: ignore[attr-defined]
        yield http


def _assert_problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code
    assert response.headers["x-request-id"]


async def test_health_metrics_and_the_openapi_document_are_open(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/health/live", "/health/ready", "/metrics", "/openapi.json"):
        assert (await client.get(path)).status_code == 200, path


async def test_no_or_bad_credentials_get_401(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/queues")
    _assert_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == 'Bearer realm="retsu"'

    response = await client.post(
        "/v1/queues", json={"name": "x"}, headers={"authorization": f"Bearer {WRONG_SECRET}"}
    )
    _assert_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == 'Bearer realm="retsu", error="invalid_token"'

    response = await client.get("/v1/queues", headers={"authorization": f"Basic {WRONG_SECRET}"})
    _assert_problem(response, 401, "unauthorized")

    # An unknown /v1 path does not reveal itself to an anonymous caller.
    _assert_problem(await client.get("/v1/nope"), 401, "unauthorized")
    _assert_problem(await client.get("/v1/nope", headers=AS_ADMIN), 404, "not_found")


async def test_scopes_are_enforced_and_the_actor_is_the_token_name(
    client: httpx.AsyncClient,
) -> None:
    name = f"auth-{uuid.uuid4().hex[:10]}"
    # A consumer token may not create a queue.
    response = await client.post("/v1/queues", json={"name": name}, headers=AS_MESSAGES)
    _assert_problem(response, 403, "forbidden")

    response = await client.post("/v1/queues", json={"name": name}, headers=AS_ADMIN)
    assert response.status_code == 201, response.text
    queue = response.json()["id"]

    # ... but runs the message lifecycle.
    response = await client.post(
        f"/v1/queues/{queue}/messages",
        json={"payload": "hello", "priority": "HIGH"},
        headers=AS_MESSAGES,
    )
    assert response.status_code == 201, response.text
    response = await client.post(f"/v1/queues/{queue}/messages/dequeue", headers=AS_MESSAGES)
    assert response.status_code == 200, response.text
    message = response.json()
    response = await client.post(
        f"/v1/queues/{queue}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"]},
        headers=AS_MESSAGES,
    )
    assert response.status_code == 204, response.text

    response = await client.patch(
        f"/v1/queues/{queue}", json={"max_delivery_attempts": 3}, headers=AS_MESSAGES
    )
    _assert_problem(response, 403, "forbidden")
    response = await client.patch(
        f"/v1/queues/{queue}", json={"max_delivery_attempts": 3}, headers=AS_ADMIN
    )
    assert response.status_code == 200, response.text

    # The queue reads, the dead letters and the audit log, once those routes exist.
    reads = await client.get("/v1/queues", params={"name": name}, headers=AS_MESSAGES)
    if reads.status_code != 405:
        assert reads.status_code == 200, reads.text
        response = await client.get(f"/v1/queues/{queue}", headers=AS_MESSAGES)
        assert response.status_code == 200, response.text
    response = await client.get(f"/v1/queues/{queue}/dead-letters", headers=AS_MESSAGES)
    if response.status_code != 404:
        _assert_problem(response, 403, "forbidden")
    audit = await client.get("/v1/audit-log", headers=AS_MESSAGES)
    if audit.status_code != 404:
        _assert_problem(audit, 403, "forbidden")
        audit = await client.get("/v1/audit-log", params={"queue_id": queue}, headers=AS_ADMIN)
        assert audit.status_code == 200, audit.text
        actors = {item["action"]: item["actor"] for item in audit.json()["items"]}
        assert actors.get("queue.created") == "ops-admin", actors
        assert actors.get("queue.updated") == "ops-admin", actors


async def test_the_output_is_json_lines_without_secrets(
    client: httpx.AsyncClient, api: RetsuProcess
) -> None:
    # Some refused and accepted traffic first, then read what the process wrote so far.
    await client.get("/v1/queues", headers={"authorization": f"Bearer {WRONG_SECRET}"})
    await client.get("/v1/queues", headers=AS_MESSAGES)
    await client.post("/v1/queues", json={"name": "x"}, headers=AS_ADMIN)
    output = api.output()
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, "debug logging produced no output"
    for line in lines:
        json.loads(line)
    for secret in SECRETS:
        assert secret not in output
