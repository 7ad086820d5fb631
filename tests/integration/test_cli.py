"""The `retsu` program as an operator meets it: roles, failures, one-line reasons."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from retsu import __version__
from tests.support.processes import free_port, retsu_env, run_retsu

UNREACHABLE_DB = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"


def test_version() -> None:
    result = run_retsu(["--version"], retsu_env())
    assert result.returncode == 0
    assert result.stdout.strip() == f"retsu {__version__}"


def test_worker_list_names_modules_then_workers() -> None:
    assert run_retsu(["worker", "list"], retsu_env()).stdout.split() == ["queue"]
    assert run_retsu(["worker", "list", "queue"], retsu_env()).stdout.split() == [
        "expired-message-cleaner",
        "dead-letter-message-cleaner",
        "state-metrics-collector",
        "scheduler",
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["worker", "run", "queue", "nope"], "unknown worker 'nope'"),
        (["worker", "run", "nope", "expired-message-cleaner"], "unknown worker module 'nope'"),
        (["worker", "list", "nope"], "unknown worker module 'nope'"),
    ],
)
def test_an_unknown_worker_fails_at_once_without_touching_the_database(
    args: list[str], needle: str
) -> None:
    started = time.monotonic()
    # The database URL points nowhere: failing on it would take the 60 s connect timeout
    # (far above what a busy host adds to the interpreter's start).
    env = retsu_env(UNREACHABLE_DB, database__acquire_timeout_seconds="60")
    result = run_retsu(args, env, timeout=90)
    assert result.returncode != 0
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "role", [["api"], ["migrate"], ["worker", "run", "queue", "expired-message-cleaner"]]
)
def test_an_unreachable_database_is_a_one_line_reason_and_a_non_zero_exit(role: list[str]) -> None:
    env = retsu_env(UNREACHABLE_DB, database__acquire_timeout_seconds="5")
    result = run_retsu(role, env)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("retsu: cannot reach PostgreSQL"), result.stderr
    assert "Traceback" not in result.stderr


def test_bad_configuration_names_the_setting(tmp_path: Path) -> None:
    result = run_retsu(["api"], retsu_env(UNREACHABLE_DB, http__port="70000"))
    assert result.returncode == 2
    assert "http.port" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    config = tmp_path / "retsu.yaml"
    config.write_text("http:\n  prot: 1\n")
    result = run_retsu(["--config", str(config), "api"], retsu_env(UNREACHABLE_DB))
    assert result.returncode == 2
    assert "http.prot" in result.stderr


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    result = run_retsu(["--config", str(tmp_path / "absent.yaml"), "api"], retsu_env())
    assert result.returncode == 2
    assert "absent.yaml" in result.stderr


def test_every_role_but_dev_needs_a_database_url() -> None:
    result = run_retsu(["api"], retsu_env())
    assert result.returncode == 2
    assert "database.url" in result.stderr


def test_a_password_in_the_database_url_never_reaches_the_output() -> None:
    url = f"postgresql://retsu:hunter2-secret@127.0.0.1:{free_port()}/db"
    result = run_retsu(["api"], retsu_env(url, logging__filter="debug"))
    assert result.returncode == 1
    assert "hunter2-secret" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("role", "workers", "needs"),
    [
        (["api"], "1", "long polling (LISTEN)"),
        (["api"], "2", "long polling (LISTEN)"),
        (["migrate"], "1", "retsu migrate"),
        (
            ["worker", "run", "queue", "state-metrics-collector"],
            "1",
            "state-metrics collector (advisory lock)",
        ),
    ],
)
def test_a_session_through_a_transaction_pooler_is_a_configuration_error(
    role: list[str], workers: str, needs: str
) -> None:
    """The docs' table: configuration errors exit 2 — this one too, although only the role
    decides whether it needs a session (checked before any connection: the database URL
    points nowhere)."""
    env = retsu_env(
        UNREACHABLE_DB,
        database__pooler="transaction",
        database__acquire_timeout_seconds="60",
        http__workers=workers,
    )
    started = time.monotonic()
    result = run_retsu(role, env, timeout=90)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("retsu: configuration error: database.pooler is transaction"), line
    assert f"{needs} needs database.session_url" in line, line
    assert time.monotonic() - started < 30
