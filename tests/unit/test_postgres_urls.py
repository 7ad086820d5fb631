"""Database URLs as operators write them (libpq style, one host or several) reach asyncpg
one host at a time, with nothing asyncpg would misread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest

from retsu.adapters.postgres import hosts as hosts_module
from retsu.adapters.postgres.hosts import (
    Host,
    NoUsableHost,
    PostgresHosts,
    check_url,
    libpq_url,
    split_hosts,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u:p@db/retsu", "postgresql://u:p@db/retsu"),
        ("postgresql+asyncpg://u@db:5433/retsu", "postgresql://u@db:5433/retsu"),
        ("postgresql://u@db/retsu?sslmode=require", "postgresql://u@db/retsu?sslmode=require"),
    ],
)
def test_every_accepted_scheme_becomes_libpqs(url: str, expected: str) -> None:
    assert libpq_url(url) == expected


def test_other_schemes_are_refused() -> None:
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        libpq_url("mysql://u@db/retsu")


def test_one_host_is_kept_exactly_as_written() -> None:
    url = "postgresql://u:p%40ss@db:5433/retsu?sslmode=require&application_name=x"
    assert split_hosts(url) == [Host(url, "db:5433")]
    socket = "postgresql://postgres@/retsu?host=/run/postgresql"
    assert split_hosts(socket) == [Host(socket, "/run/postgresql")]


def test_connect_timeout_is_taken_out_asyncpg_would_send_it_as_a_server_setting() -> None:
    [host] = split_hosts("postgres://u@db/retsu?connect_timeout=3&sslmode=require")
    assert host.url == "postgresql://u@db/retsu?sslmode=require"


def test_sqlalchemys_ssl_parameter_becomes_libpqs_sslmode() -> None:
    [host] = split_hosts("postgresql+asyncpg://u@db/retsu?ssl=require")
    assert host.url == "postgresql://u@db/retsu?sslmode=require"


def test_hosts_listed_before_the_path_become_one_url_each_in_order() -> None:
    url = "postgresql://u:pw@db1:5432,[::1]:5433,db3/retsu?target_session_attrs=read-write"
    assert split_hosts(url) == [
        Host("postgresql://u:pw@db1:5432/retsu?target_session_attrs=read-write", "db1:5432"),
        Host("postgresql://u:pw@[::1]:5433/retsu?target_session_attrs=read-write", "[::1]:5433"),
        Host("postgresql://u:pw@db3/retsu?target_session_attrs=read-write", "db3"),
    ]


def test_hosts_listed_in_the_query_pair_with_their_ports() -> None:
    url = "postgresql://u@/retsu?host=db1,db2&port=5432,5433&target_session_attrs=primary"
    assert [host.label for host in split_hosts(url)] == ["db1:5432", "db2:5433"]
    assert split_hosts(url)[1].url == (
        "postgresql://u@/retsu?host=db2&port=5433&target_session_attrs=primary"
    )
    one_port = split_hosts("postgresql://u@/retsu?host=db1,db2&port=6432")
    assert [host.label for host in one_port] == ["db1:6432", "db2:6432"]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@db1:5432,db2:5432/retsu?target_session_attrs=read-write",
        "postgresql://u@db1,db2/retsu?connect_timeout=2",
        "postgresql://u@/retsu?host=db1,db2&port=5432,5433",
        "postgresql://u@db/retsu?target_session_attrs=any",
        "postgresql:///retsu?host=/run/postgresql",
    ],
)
def test_urls_settings_accept(url: str) -> None:
    check_url(url)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://u@db1:5432,db2:x/retsu", "has an invalid port"),
        ("postgresql://u@db1:5432,,db2/retsu", "has an empty host in its list"),
        ("postgresql://u@/retsu?host=a,b,c&port=1,2", "names 3 hosts but 2 ports"),
        ("postgresql://u@db/retsu?connect_timeout=soon", "has a connect_timeout that is not"),
        ("postgresql://u@db/retsu?connect_timeout=0", "has a connect_timeout that is not"),
        ("postgresql://u@db/retsu?connect_timeout=nan", "has a connect_timeout that is not"),
        ("postgresql://u@db1,db2/retsu?target_session_attrs=standby", "target_session_attrs"),
        ("postgresql://u@db/retsu?target_session_attrs=read-only", "target_session_attrs"),
    ],
)
def test_urls_settings_refuse(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_url(url)


class Attempts:
    """asyncpg.connect replaced: each host's outcome scripted, every attempt recorded."""

    def __init__(self, outcomes: dict[str, Any]) -> None:
        self.outcomes = outcomes
        self.tried: list[tuple[str, float]] = []

    async def connect(self, url: str, *, timeout: float, **_: Any) -> str:  # noqa: ASYNC109
        host = url.split("@", 1)[1].split("/", 1)[0]
        self.tried.append((host, timeout))
        outcome = self.outcomes[host]
        if outcome == "silent":
            await asyncio.sleep(timeout)
            raise TimeoutError
        if isinstance(outcome, BaseException):
            raise outcome
        return str(outcome)


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> Attempts:
    scripted = Attempts({})
    monkeypatch.setattr(hosts_module.asyncpg, "connect", scripted.connect)
    return scripted


async def test_a_silent_first_host_costs_its_share_of_the_timeout_not_all_of_it(
    attempts: Attempts,
) -> None:
    # asyncpg alone gives the whole list one timeout: a first host that never answers (a
    # machine gone) uses it up, and the primary behind it is never tried.
    attempts.outcomes = {"gone:5432": "silent", "primary:5432": "connection"}
    hosts = PostgresHosts("postgresql://u@gone:5432,primary:5432/retsu")
    started = time.monotonic()
    assert await hosts.connect(timeout=1.0) == "connection"
    assert 0.45 < time.monotonic() - started < 0.9
    assert attempts.tried == [("gone:5432", 0.5), ("primary:5432", 0.5)]


async def test_the_host_that_answered_last_is_tried_first(attempts: Attempts) -> None:
    attempts.outcomes = {"gone:5432": "silent", "primary:5432": "connection"}
    hosts = PostgresHosts("postgresql://u@gone:5432,primary:5432/retsu?connect_timeout=0.2")
    await hosts.connect(timeout=5)
    attempts.tried.clear()
    started = time.monotonic()
    for _ in range(3):
        assert await hosts.connect(timeout=5) == "connection"
    assert time.monotonic() - started < 0.1  # no wait on the dead host any more
    assert attempts.tried == [("primary:5432", 0.2)] * 3


async def test_a_cancelled_attempt_moves_on_to_the_next_host(attempts: Attempts) -> None:
    # A readiness probe gives up (cancels) before the silent host's share ends: the next
    # probe must not start with that host again, or it would never reach the primary.
    attempts.outcomes = {"gone:5432": "silent", "primary:5432": "connection"}
    hosts = PostgresHosts("postgresql://u@gone:5432,primary:5432/retsu")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await hosts.connect(timeout=10)
    assert await asyncio.wait_for(hosts.connect(timeout=10), 1) == "connection"


async def test_a_standby_is_passed_over_and_named_when_nothing_else_answers(
    attempts: Attempts,
) -> None:
    standby = asyncpg.TargetServerAttributeNotMatched("not read-write")
    attempts.outcomes = {"old:5432": ConnectionRefusedError(111, "refused"), "new:5432": standby}
    hosts = PostgresHosts("postgresql://u:secret@old:5432,new:5432/retsu")
    with pytest.raises(NoUsableHost) as raised:
        await hosts.connect(timeout=1)
    message = str(raised.value)
    assert "old:5432: ConnectionRefusedError" in message
    assert "new:5432: not a read-write server" in message
    assert "secret" not in message
    assert isinstance(raised.value, OSError)  # unreachable, like a refused connection
    attempts.outcomes["new:5432"] = "promoted"
    assert await hosts.connect(timeout=1) == "promoted"


async def test_one_host_raises_its_own_error(attempts: Attempts) -> None:
    refused = ConnectionRefusedError(111, "refused")
    attempts.outcomes = {"db:5432": refused}
    with pytest.raises(ConnectionRefusedError):
        await PostgresHosts("postgresql://u@db:5432/retsu").connect(timeout=1)
    attempts.outcomes = {"db:5432": asyncpg.TargetServerAttributeNotMatched("standby")}
    with pytest.raises(NoUsableHost, match="db:5432: not a read-write server"):
        await PostgresHosts("postgresql://u@db:5432/retsu").connect(timeout=1)
