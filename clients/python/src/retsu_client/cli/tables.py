"""Plain-text tables for people: left-aligned text, right-aligned numbers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def shorten(text: str, width: int = 40) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns sized to their content; a column of numbers is right-aligned."""
    texts = [[cell(value) for value in row] for row in rows]
    right = [
        bool(rows) and all(_numeric(row[i]) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]
    widths = [
        max([len(header), *(len(row[i]) for row in texts)]) for i, header in enumerate(headers)
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(widths[i]) if right[i] else value.ljust(widths[i])
            for i, value in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in texts)])


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """A key/value listing (one field per line)."""
    width = max(len(key) for key, _ in pairs)
    return "\n".join(f"{key.ljust(width)}  {cell(value)}" for key, value in pairs)
