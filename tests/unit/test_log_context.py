"""Request-scoped log fields: ``request_id`` while answering a request, ``trace_id`` and
``span_id`` inside a span (only when tracing installed its source)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from retsu.adapters.telemetry import logging as retsu_logging
from retsu.adapters.telemetry.logging import (
    configure_logging,
    current_request_id,
    set_trace_context_source,
)

NAME = "retsu_test_log_context"
TRACE = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    source = retsu_logging._trace_context_source
    yield
    set_trace_context_source(source)
    configure_logging(filter="warn", format="pretty", role="-", environment="-", version="-")
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def _setup(format: str) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(
        filter="info", format=format, role="api", environment="test", version="1", stream=stream
    )
    return stream


def _json(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_lines_logged_while_answering_a_request_carry_its_id() -> None:
    stream = _setup("json")
    logging.getLogger(NAME).info("outside")
    token = current_request_id.set("req-42")
    try:
        logging.getLogger(NAME).info("inside")
    finally:
        current_request_id.reset(token)
    outside, inside = _json(stream)
    assert "request_id" not in outside
    assert inside["request_id"] == "req-42"
    assert (inside["role"], inside["environment"], inside["version"]) == ("api", "test", "1")


def test_an_explicit_request_id_wins_over_the_context() -> None:
    stream = _setup("json")
    token = current_request_id.set("from-context")
    try:
        logging.getLogger(NAME).error("boom", extra={"request_id": "explicit"})
    finally:
        current_request_id.reset(token)
    [line] = _json(stream)
    assert line["request_id"] == "explicit"


def test_trace_ids_appear_only_inside_a_span_and_only_with_a_source() -> None:
    stream = _setup("json")
    set_trace_context_source(None)
    logging.getLogger(NAME).info("tracing off")
    set_trace_context_source(lambda: None)
    logging.getLogger(NAME).info("no span")
    set_trace_context_source(lambda: TRACE)
    logging.getLogger(NAME).info("in a span")
    off, no_span, in_span = _json(stream)
    assert "trace_id" not in off and "trace_id" not in no_span
    assert (in_span["trace_id"], in_span["span_id"]) == TRACE


def test_the_pretty_format_shows_the_request_context_too() -> None:
    stream = _setup("pretty")
    set_trace_context_source(lambda: TRACE)
    token = current_request_id.set("req-7")
    try:
        logging.getLogger(NAME).warning("slow")
    finally:
        current_request_id.reset(token)
    line = stream.getvalue()
    assert "request_id=req-7" in line
    assert f"trace_id={TRACE[0]}" in line
    assert line.rstrip().endswith("role=api environment=test version=1")


def test_the_http_middleware_shares_the_logging_context_variable() -> None:
    from retsu.adapters.http import middleware

    assert middleware.current_request_id is current_request_id
