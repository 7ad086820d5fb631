"""Log setup (SPEC §7): formats, per-logger levels, context fields, redaction."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from retsu.adapters.telemetry.logging import (
    OFF,
    LogFilter,
    LogFilterError,
    SecretRedactingFilter,
    configure_logging,
    parse_log_filter,
    redact_secrets,
)

SECRET = "hunter2-super-secret-value"
CONTEXT = {"role": "api", "environment": "test", "version": "0.1.0"}
# Logger names private to this module, so levels set here never leak into other tests.
NAME = "retsu_test_logging"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    # A last call resets the per-logger levels the test's filter set; then drop its handler.
    configure_logging(filter="warn", format="pretty", role="-", environment="-", version="-")
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def setup(filter: str = "debug", format: str = "json", **context: str) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(filter=filter, format=format, stream=stream, **{**CONTEXT, **context})
    return stream


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


# --- filter parsing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("warn", LogFilter(logging.WARNING)),
        ("WARNING", LogFilter(logging.WARNING)),
        ("trace", LogFilter(logging.DEBUG)),
        ("Debug", LogFilter(logging.DEBUG)),
        ("info", LogFilter(logging.INFO)),
        ("error", LogFilter(logging.ERROR)),
        ("critical", LogFilter(logging.CRITICAL)),
        ("off", LogFilter(OFF)),
        (
            "info,retsu.adapters.postgres=debug",
            LogFilter(logging.INFO, (("retsu.adapters.postgres", logging.DEBUG),)),
        ),
        (
            " error , a=warn, b.c=OFF ,a=info",
            LogFilter(logging.ERROR, (("a", logging.INFO), ("b.c", OFF))),
        ),
    ],
)
def test_parse_log_filter(text: str, expected: LogFilter) -> None:
    assert parse_log_filter(text) == expected


@pytest.mark.parametrize(
    "text", ["", " ", "loud", "a=debug", "info,a", "info,a=loud", "info,,a=debug", "info,a b=info"]
)
def test_parse_log_filter_rejects(text: str) -> None:
    with pytest.raises(LogFilterError):
        parse_log_filter(text)


# --- JSON ---------------------------------------------------------------------------------


def test_json_lines_carry_the_context() -> None:
    stream = setup(format="json")
    logger = logging.getLogger(f"{NAME}.api")
    logger.info("hello %s", "world", extra={"queue_name": "orders", "count": 3})
    logger.warning("second")
    first, second = json_lines(stream)
    assert first["message"] == "hello world"
    assert first["level"] == "INFO"
    assert first["logger"] == f"{NAME}.api"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["timestamp"])
    assert first["queue_name"] == "orders"
    assert first["count"] == 3
    assert second["level"] == "WARNING"
    for line in (first, second):
        assert {key: line[key] for key in CONTEXT} == CONTEXT
        assert "exception" not in line


def test_json_extras_cannot_replace_fixed_fields() -> None:
    stream = setup(format="json")
    logging.getLogger(NAME).warning("x", extra={"role": "forged", "level": "forged"})
    (line,) = json_lines(stream)
    assert line["role"] == "api"
    assert line["level"] == "WARNING"


def test_json_exception_text() -> None:
    stream = setup(format="json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger(NAME).exception("failed")
    (line,) = json_lines(stream)
    assert line["message"] == "failed"
    assert "Traceback" in line["exception"]
    assert "RuntimeError: boom" in line["exception"]


def test_json_handles_values_it_cannot_encode() -> None:
    stream = setup(format="json")
    logging.getLogger(NAME).warning("x", extra={"thing": object(), "mapping": {1: "a"}})
    (line,) = json_lines(stream)
    assert line["thing"].startswith("<object object")


# --- pretty -------------------------------------------------------------------------------


def test_pretty_line_shape() -> None:
    stream = setup(format="pretty")
    logging.getLogger(f"{NAME}.api").info("queue created", extra={"queue_name": "orders"})
    line = stream.getvalue().rstrip("\n")
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z INFO  {NAME}\.api  queue created  "
        r"queue_name=orders role=api environment=test version=0\.1\.0",
        line,
    ), line


def test_pretty_quotes_values_with_spaces_and_escapes_newlines() -> None:
    stream = setup(format="pretty")
    logging.getLogger(NAME).warning("line one\nFAKE line", extra={"detail": "two words"})
    output = stream.getvalue()
    assert output.count("\n") == 1
    assert "line one\\nFAKE line" in output
    assert 'detail="two words"' in output


def test_pretty_exception_follows_indented() -> None:
    stream = setup(format="pretty")
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger(NAME).error("failed", exc_info=True)
    first, *rest = stream.getvalue().splitlines()
    assert "failed" in first
    assert rest
    assert all(line.startswith("    ") for line in rest)
    assert "ValueError: bad" in rest[-1]


# --- levels -------------------------------------------------------------------------------


def test_filter_levels_apply_per_logger() -> None:
    stream = setup(filter=f"warn,{NAME}.db=debug,{NAME}.noisy=error")
    logging.getLogger(f"{NAME}.api").info("dropped: root is warn")
    logging.getLogger(f"{NAME}.api").warning("kept")
    logging.getLogger(f"{NAME}.db").debug("kept: db is debug")
    logging.getLogger(f"{NAME}.db.pool").debug("kept: child inherits db")
    logging.getLogger(f"{NAME}.noisy").warning("dropped: noisy is error")
    logging.getLogger(f"{NAME}.noisy").error("kept")
    messages = [line["message"] for line in json_lines(stream)]
    assert messages == ["kept", "kept: db is debug", "kept: child inherits db", "kept"]


def test_trace_means_debug() -> None:
    stream = setup(filter="trace")
    logging.getLogger(NAME).debug("visible")
    assert [line["message"] for line in json_lines(stream)] == ["visible"]


def test_off_silences_everything() -> None:
    stream = setup(filter="off")
    logging.getLogger(NAME).critical("nothing")
    assert stream.getvalue() == ""


def test_default_warn_drops_info() -> None:
    stream = setup(filter="warn")
    logging.getLogger(NAME).info("hidden")
    logging.getLogger(NAME).warning("shown")
    assert [line["message"] for line in json_lines(stream)] == ["shown"]


# --- idempotence --------------------------------------------------------------------------


def test_second_call_replaces_the_handler() -> None:
    first = setup(filter=f"warn,{NAME}.db=debug")
    second = setup(filter="warn", role="worker")
    logging.getLogger(NAME).warning("once")
    logging.getLogger(f"{NAME}.db").debug("dropped: the old per-logger level is gone")
    assert first.getvalue() == ""
    (line,) = json_lines(second)
    assert line["message"] == "once"
    assert line["role"] == "worker"
    assert logging.getLogger(f"{NAME}.db").level == logging.NOTSET


def test_other_handlers_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    setup()
    setup()
    logging.getLogger(NAME).warning("seen by caplog too")
    assert "seen by caplog too" in caplog.text


def test_bad_arguments_leave_the_configuration_alone() -> None:
    stream = setup()
    with pytest.raises(LogFilterError):
        configure_logging(filter="loud", format="json", role="api", environment="t", version="v")
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging(filter="info", format="xml", role="api", environment="t", version="v")
    logging.getLogger(NAME).debug("still configured")
    assert [line["message"] for line in json_lines(stream)] == ["still configured"]


# --- redaction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://user:pw@host/db", "postgresql://user:***@host/db"),
        (
            "connecting to postgresql://retsu:p@ss/word@db:5432/retsu now",
            "connecting to postgresql://retsu:***@db:5432/retsu now",
        ),
        ("redis://:pw@cache:6379", "redis://:***@cache:6379"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        ("http://127.0.0.1:4317", "http://127.0.0.1:4317"),
        ("authorization: Bearer abc.def-ghi", "authorization: Bearer ***"),
        ("bearer abc, next", "bearer ***, next"),
        ("host=db password=pw user=u", "host=db password=*** user=u"),
        ("/db?user=u&password=pw&x=1", "/db?user=u&password=***&x=1"),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_redact_secrets(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_secrets_never_reach_the_log() -> None:
    stream = setup(format="json")
    logger = logging.getLogger(NAME)
    logger.warning("db at postgresql://retsu:%s@db/retsu", SECRET)
    logger.warning("header Bearer %s", SECRET, extra={"url": f"redis://:{SECRET}@cache"})
    try:
        raise ConnectionError(f"cannot reach postgresql://retsu:{SECRET}@db/retsu")
    except ConnectionError:
        logger.exception("connect failed")
    output = stream.getvalue()
    assert SECRET not in output
    first, second, third = json_lines(stream)
    assert first["message"] == "db at postgresql://retsu:***@db/retsu"
    assert second["message"] == "header Bearer ***"
    assert second["url"] == "redis://:***@cache"
    assert "postgresql://retsu:***@db/retsu" in third["exception"]


def test_secrets_never_reach_the_pretty_log() -> None:
    stream = setup(format="pretty")
    logging.getLogger(NAME).warning("url postgresql://retsu:%s@db/retsu", SECRET)
    assert SECRET not in stream.getvalue()


def test_filter_survives_bad_format_arguments() -> None:
    record = logging.LogRecord(NAME, logging.WARNING, __file__, 1, "%d items", ("x",), None)
    assert SecretRedactingFilter().filter(record) is True
    assert record.getMessage() == "%d items"
