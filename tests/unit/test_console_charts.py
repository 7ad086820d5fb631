"""The console's server-side SVG charts (adapters/http/console/charts.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from retsu.adapters.http.console.charts import Series, line_chart, nice_ceiling, sparkline

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _polylines(svg: str) -> list[list[tuple[float, float]]]:
    found = re.findall(r'<polyline class="series s-\w+" points="([^"]+)"', svg)
    return [[tuple(map(float, p.split(","))) for p in line.split()] for line in found]  # type: ignore[misc]


def test_nice_ceilings() -> None:
    assert [nice_ceiling(v) for v in (0, 1, 3, 7, 10, 11, 240, 999, 1001)] == [
        1,
        1,
        5,
        10,
        10,
        20,
        500,
        1000,
        2000,
    ]


def test_a_line_spans_the_window_and_scales_to_a_nice_peak() -> None:
    times = [START + timedelta(minutes=m) for m in (30, 45, 60)]
    svg = line_chart(
        times,
        [Series("ready", "Ready", [0, 40, 80])],
        start=START,
        end=START + timedelta(hours=1),
        interval_seconds=900,
        label="Depth",
    )
    (line,) = _polylines(svg)
    xs = [x for x, _ in line]
    # Half-way through the window is half-way across the plot (46 px margin, 504 px wide).
    assert xs == [46 + 252, 46 + 378, 46 + 504]
    ys = [y for _, y in line]
    assert ys[0] == 168.0 and ys[2] == round(10 + 158 * (1 - 80 / 100), 1)
    assert ">100</text>" in svg and ">12:00</text>" in svg and ">13:00</text>" in svg


def test_a_gap_in_the_snapshots_is_not_drawn_over() -> None:
    minutes = (0, 1, 2, 30, 31)
    times = [START + timedelta(minutes=m) for m in minutes]
    svg = line_chart(
        times,
        [Series("enqueued", "Enqueued", [1, 2, 3, 4, 5])],
        start=START,
        end=START + timedelta(hours=1),
        interval_seconds=60,
        label="Throughput",
    )
    assert [len(line) for line in _polylines(svg)] == [3, 2]


def test_one_point_is_a_dot_and_labels_are_escaped() -> None:
    svg = line_chart(
        [START],
        [Series("ready", "Ready", [3])],
        start=START - timedelta(hours=1),
        end=START,
        interval_seconds=15,
        label="<script>",
    )
    assert '<circle class="s-ready"' in svg
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_sparklines_scale_every_series_together() -> None:
    svg = sparkline(
        [Series("ready", "Ready", [0, 10]), Series("enqueued", "In", [5, 5])],
        label="orders",
    )
    ready, enqueued = _polylines(svg)
    assert ready[1][1] == 1.0  # the peak touches the top
    assert enqueued[0][1] == enqueued[1][1] == 1 + 26 * 0.5
    assert sparkline([Series("ready", "Ready", [])], label="empty").count("polyline") == 0
