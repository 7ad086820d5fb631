"""Log formatting for ``retsu-worker``: the worker logs through stdlib ``logging`` with its
fields in ``extra`` (queue, consumer, message_id, outcome, ...); these formatters print
them as JSON lines or as ``key=value`` pairs. Two small classes instead of a logging
dependency: the client may depend on httpx and msgspec only (SPEC §9)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import msgspec

__all__ = ["JsonFormatter", "KeyValueFormatter", "configure", "record_fields"]

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of a record."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **record_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry, enc_hook=str).decode()


class KeyValueFormatter(logging.Formatter):
    """``2030-01-01 12:00:00,000 INFO retsu_client.worker handled queue=emails ...``"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = record_fields(record)
        if not fields:
            return line
        pairs = " ".join(f"{key}={value}" for key, value in fields.items())
        head, sep, tail = line.partition("\n")  # keep a traceback below the pairs
        return f"{head} {pairs}{sep}{tail}"


def configure(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "asyncio"):  # their debug lines drown the worker's
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
