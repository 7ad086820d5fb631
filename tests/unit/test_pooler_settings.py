"""database.pooler: what a transaction-mode pooler changes, decided before any connection.

The end-to-end proof is tests/integration/test_pgbouncer_topology.py (Debian's
pgbouncer in transaction mode); these pin the decisions themselves.
"""

from __future__ import annotations

from typing import Any

import pytest

from retsu.adapters.postgres.engine import PIN_TRANSACTION, PLANNER_PINS, connect_arguments
from retsu.entrypoints.containers import ApiContainer, WorkerContainer
from retsu.entrypoints.database import ConfigurationError, session_url, unreachable_reason
from retsu.entrypoints.settings import ConfigError, Settings, build_settings

POOLER = "postgresql://retsu@pgbouncer:6432/retsu"
DIRECT = "postgresql://retsu@postgres:5432/retsu"


def settings(**database: Any) -> Settings:
    return build_settings({"database": database})


@pytest.mark.parametrize(
    ("database", "behind"),
    [
        ({"url": DIRECT}, False),
        ({"url": POOLER, "session_url": DIRECT}, True),
        # The same URL twice is no pooler: nothing distinguishes the two.
        ({"url": DIRECT, "session_url": DIRECT}, False),
        ({"url": POOLER, "pooler": "transaction"}, True),
        ({"url": POOLER, "session_url": DIRECT, "pooler": "none"}, False),
        ({"url": DIRECT, "pooler": "none"}, False),
    ],
)
def test_auto_means_transaction_exactly_when_a_separate_session_url_is_set(
    database: dict[str, str], behind: bool
) -> None:
    assert settings(**database).database.transaction_pooler is behind


def test_an_unknown_pooler_mode_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"database\.pooler: must be one of auto, none, transaction"
    ):
        settings(url=DIRECT, pooler="session")


def connect_args(*, transaction_pooler: bool) -> dict[str, Any]:
    return connect_arguments(
        application_name="retsu-api", timeout_seconds=5, transaction_pooler=transaction_pooler
    )


def test_direct_sessions_carry_the_planner_pins_and_cache_statements() -> None:
    args = connect_args(transaction_pooler=False)
    assert args["server_settings"] == {
        **PLANNER_PINS,
        "default_transaction_isolation": "read committed",
        "application_name": "retsu-api",
    }
    assert "statement_cache_size" not in args  # asyncpg's default cache


def test_behind_a_transaction_pooler_nothing_outlives_a_transaction() -> None:
    args = connect_args(transaction_pooler=True)
    # PgBouncer accepts application_name as a startup parameter, and refuses the others.
    assert args["server_settings"] == {"application_name": "retsu-api"}
    # No named prepared statement: asyncpg's cache and SQLAlchemy's are both off.
    assert args["statement_cache_size"] == 0
    assert args["prepared_statement_cache_size"] == 0


def test_the_transaction_pins_are_the_session_pins() -> None:
    for name, value in PLANNER_PINS.items():
        assert f"set_config('{name}', '{value}', true)" in PIN_TRANSACTION


def test_the_pooled_database_pins_each_transaction_only_behind_a_pooler() -> None:
    behind = ApiContainer(settings=settings(url=POOLER, session_url=DIRECT))
    direct = ApiContainer(settings=settings(url=DIRECT))
    assert behind.storage.database()._preamble is not None
    assert direct.storage.database()._preamble is None


def test_what_needs_a_session_uses_the_session_url() -> None:
    container = WorkerContainer(settings=settings(url=POOLER, session_url=DIRECT))
    sessions = container.storage.session_database()
    assert sessions is not container.storage.database()
    assert sessions.engine.url.host == "postgres"
    assert container.storage.engine().url.host == "pgbouncer"
    assert ApiContainer(settings=settings(url=POOLER, session_url=DIRECT)).storage.message_signals()
    api = ApiContainer(settings=settings(url=POOLER, session_url=DIRECT))
    assert [host.label for host in api.storage.message_signals()._hosts.hosts] == ["postgres:5432"]


def test_without_a_session_url_sessions_share_the_pooled_database() -> None:
    container = WorkerContainer(settings=settings(url=DIRECT))
    assert container.storage.session_database() is container.storage.database()


def test_a_session_is_refused_through_a_transaction_pooler() -> None:
    with pytest.raises(ConfigurationError, match=r"the collector needs database\.session_url"):
        session_url(settings(url=POOLER, pooler="transaction").database, "the collector")
    assert session_url(settings(url=POOLER, session_url=DIRECT).database, "x") == DIRECT
    assert session_url(settings(url=DIRECT).database, "x") == DIRECT


def test_a_refused_startup_parameter_says_what_to_set() -> None:
    reason = unreachable_reason(Exception("unsupported startup parameter: enable_seqscan"))
    assert reason.startswith("unsupported startup parameter: enable_seqscan (")
    assert "database.pooler" in reason
    assert unreachable_reason(Exception("connection refused\nmore")) == "connection refused"
