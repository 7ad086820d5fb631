"""How the console shows values: numbers, ages, times, payloads (Jinja filters).

Plain functions, registered on the template engine by ``register_filters``; a template
never computes anything a use case should.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any, Final

import msgspec
from jinja2 import Environment

# Payload previews in a table: enough to recognise a message, bounded whatever its size.
PREVIEW_CHARS: Final = 96
# Pretty-printing is skipped past this size (the raw text is shown instead).
PRETTY_MAX_CHARS: Final = 256 * 1024
# ... and past this depth: each level indents every line below it, so a small payload
# nested 990 deep became megabytes (and a RecursionError in the recursive printer).
PRETTY_MAX_DEPTH: Final = 32
_JSON_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET: Final = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP: Final = {"[": 1, "{": 1, "]": -1, "}": -1}


def number(value: int | float | None) -> str:
    """``1234567`` → ``1,234,567``."""
    if value is None:
        return "—"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def duration(seconds: float | None) -> str:
    """A short human duration: ``0 s``, ``42 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "—"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def oldest_ready(stats: Any) -> str:
    """A queue's oldest-ready age, or "—" when nothing is ready (the stats say 0 then,
    which reads as a message that has waited 0 s)."""
    return duration(stats.oldest_ready_age_seconds) if stats.ready else "—"


def took(start: datetime | None, end: datetime | None) -> str:
    """How long from ``start`` to ``end`` (an attempt's delivery to its end)."""
    if start is None or end is None:
        return "—"
    seconds = (end - start).total_seconds()
    return f"{seconds:.1f} s" if seconds < 10 else duration(seconds)


def utc(moment: datetime | None) -> str:
    """``2026-11-30 15:42:14 UTC``."""
    if moment is None:
        return "—"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def stamp(moment: datetime | None) -> str:
    """``2026-11-30 15:42:14`` (UTC; the column header says so)."""
    return utc(moment).removesuffix(" UTC")


def iso(moment: datetime | None) -> str:
    if moment is None:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """``12 s ago``, ``in 3 min`` (relative to now)."""
    if moment is None:
        return "—"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = ((now or datetime.now(UTC)) - moment).total_seconds()
    if -1 < delta < 1:
        return "now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def short_id(value: object) -> str:
    """The tail of an id: UUIDv7s made in the same millisecond share their head."""
    text = str(value)
    return "…" + text[-12:] if len(text) > 13 else text


def preview(payload: str, limit: int = PREVIEW_CHARS) -> str:
    """One line of a payload for a table cell."""
    line = " ".join(payload.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def nesting_depth(text: str) -> int:
    """How deep JSON text nests, counted without recursion (brackets inside strings do
    not count; the text need not be valid JSON)."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def pretty(payload: str) -> tuple[str, bool]:
    """The payload pretty-printed when it is JSON (and neither huge nor deeply nested),
    with whether it was. Keys keep their order, text its characters (msgspec's printer
    copies strings as they are; it never builds Python objects)."""
    if len(payload) > PRETTY_MAX_CHARS or nesting_depth(payload) > PRETTY_MAX_DEPTH:
        return payload, False
    try:
        return msgspec.json.format(payload, indent=2), True
    except (msgspec.DecodeError, RecursionError):
        return payload, False


def register_filters(environment: Environment) -> None:
    environment.filters.update(
        number=number,
        duration=duration,
        oldest_ready=oldest_ready,
        took=took,
        utc=utc,
        stamp=stamp,
        iso=iso,
        ago=ago,
        preview=preview,
        short_id=short_id,
    )
    environment.globals.update(pretty=pretty)
    # Templates are rendered once per request: no template reloading, clean whitespace.
    environment.trim_blocks = True
    environment.lstrip_blocks = True
