"""Fixtures of the retsu-client suite (kept apart from the server's `tests` package: this
directory is not a package, so its modules never clash with the server's).

`target` runs a test twice: against the in-memory fake and against a real `retsu api`
started for the session on a database of its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Test the client in this checkout even where an installed copy exists.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from client_support import (
    RealServer,
    Target,
    fake_target,
    require_services,
    start_real_server,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_server: needs a real retsu server and PostgreSQL")


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    started = start_real_server(tmp_path_factory.mktemp("retsu-server"))
    if isinstance(started, str):
        if require_services():
            pytest.fail(f"RETSU_REQUIRE_SERVICES is set but {started}", pytrace=False)
        pytest.skip(f"no real retsu server: {started}")
    yield started
    started.stop()


@pytest.fixture(scope="session")
def real_collector(real_server: RealServer, tmp_path_factory: pytest.TempPathFactory) -> RealServer:
    """The real server with a state-metrics collector (history snapshots every 5 s)."""
    real_server.start_collector(tmp_path_factory.mktemp("retsu-collector"))
    return real_server


def _target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "fake":
        target = fake_target()
    else:
        server: RealServer = request.getfixturevalue("real_server")
        target = Target("real", server.url, server=server)
    yield target
    target.close()


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_server)])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    yield from _target(request)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real_server)])
def live_target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """Like `target`, but the fake runs on the system clock: for the Worker, whose timers
    are real."""
    if request.param == "fake":
        from retsu_client.testing import SystemClock

        target = fake_target(SystemClock())
    else:
        server: RealServer = request.getfixturevalue("real_server")
        target = Target("real", server.url, server=server)
    yield target
    target.close()
