"""Charts drawn on the server as inline SVG (SPEC §3.9): no chart library, no JavaScript.

A chart is a few polylines over a time axis; colours come from the stylesheet (each series
has the class ``s-<key>``), so dark mode recolours them. The x axis spans the whole window
asked for (the caller starts it at the first snapshot when the history is younger than the
window); a gap in the data (no snapshots while no collector ran) stays a gap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from markupsafe import Markup, escape

__all__ = ["Series", "line_chart", "nice_ceiling", "sparkline"]


@dataclass(frozen=True, slots=True)
class Series:
    key: str  # the CSS class suffix: s-ready, s-enqueued, …
    label: str
    values: Sequence[float]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 × 10^k at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        candidate = step * 10.0**exponent
        if candidate >= value:
            return candidate
    return 10.0 ** (exponent + 1)  # pragma: no cover - the loop always returns


def _number(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 10_000:
        return f"{value / 1_000:g}k"
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


def _coordinates(points: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def _runs(
    times: Sequence[datetime], values: Sequence[float], gap: timedelta | None
) -> list[list[tuple[datetime, float]]]:
    """The points split where consecutive snapshots are further apart than ``gap``."""
    runs: list[list[tuple[datetime, float]]] = []
    previous: datetime | None = None
    for moment, value in zip(times, values, strict=True):
        if not runs or (gap is not None and previous is not None and moment - previous > gap):
            runs.append([])
        runs[-1].append((moment, value))
        previous = moment
    return runs


def line_chart(
    times: Sequence[datetime],
    series: Sequence[Series],
    *,
    start: datetime,
    end: datetime,
    interval_seconds: float,
    label: str,
    width: int = 560,
    height: int = 190,
) -> Markup:
    """A line chart of ``series`` (each value at the same ``times``) over [start, end]."""
    left, right, top, bottom = 46, 10, 10, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    span = max((end - start).total_seconds(), 1.0)
    peak = nice_ceiling(max((max(s.values, default=0) for s in series), default=0))

    def x(moment: datetime) -> float:
        return left + plot_w * min(max((moment - start).total_seconds() / span, 0.0), 1.0)

    def y(value: float) -> float:
        return top + plot_h * (1 - value / peak)

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
    ]
    for fraction in (0.0, 0.5, 1.0):
        level = top + plot_h * (1 - fraction)
        parts.append(
            f'<line class="grid-line" x1="{left}" x2="{width - right}" '
            f'y1="{level:.1f}" y2="{level:.1f}"/>'
        )
        parts.append(
            f'<text x="{left - 6}" y="{level + 4:.1f}" text-anchor="end">'
            f"{_number(peak * fraction)}</text>"
        )
    # Times in UTC, 24-hour, as everywhere in the console; seconds when the axis spans a
    # few minutes only (a young queue's), the day when it spans days.
    if span > 2 * 86_400:
        time_format = "%a %d %H:%M"
    elif span < 600:
        time_format = "%H:%M:%S"
    else:
        time_format = "%H:%M"
    for fraction, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        moment = (start + timedelta(seconds=span * fraction)).astimezone(UTC)
        text = moment.strftime(time_format)
        parts.append(
            f'<text x="{left + plot_w * fraction:.1f}" y="{height - 6}" '
            f'text-anchor="{anchor}">{text}</text>'
        )
    parts.append(
        f'<line class="axis" x1="{left}" x2="{width - right}" '
        f'y1="{top + plot_h}" y2="{top + plot_h}"/>'
    )
    # Consecutive points further apart than a few intervals are a gap, not a line.
    gap = timedelta(seconds=interval_seconds * 3) if interval_seconds > 0 else None
    for one in series:
        for run in _runs(times, one.values, gap):
            points = [(x(moment), y(value)) for moment, value in run]
            if len(points) == 1:
                (px, py) = points[0]
                parts.append(f'<circle class="s-{one.key}" cx="{px:.1f}" cy="{py:.1f}" r="2"/>')
            else:
                parts.append(
                    f'<polyline class="series s-{one.key}" points="{_coordinates(points)}"/>'
                )
    parts.append("</svg>")
    return Markup("".join(parts))


def sparkline(
    series: Sequence[Series],
    *,
    label: str,
    width: int = 120,
    height: int = 28,
) -> Markup:
    """A tiny line per series, scaled together, no axes (a table cell's trend)."""
    peak = nice_ceiling(max((max(s.values, default=0) for s in series), default=0))
    parts = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" role="img" '
        f'preserveAspectRatio="none" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
    ]
    for one in series:
        count = len(one.values)
        if count == 0:
            continue
        step = width / max(count - 1, 1)
        points = [
            (index * step if count > 1 else width - 1, 1 + (height - 2) * (1 - value / peak))
            for index, value in enumerate(one.values)
        ]
        parts.append(f'<polyline class="series s-{one.key}" points="{_coordinates(points)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
