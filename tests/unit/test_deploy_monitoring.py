"""deploy/: the Grafana dashboard and Prometheus files only use metrics Retsu exports.

Every metric name in a PromQL expression (dashboard panels and variables, alert rules)
must be one a Retsu process exposes, suffixes included (``_total``, ``_bucket``,
``_count``, ``_sum``) — so a renamed metric breaks this test, not a dashboard in
production.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.telemetry.metrics import Metrics
from retsu.adapters.telemetry.state_metrics import StateMetricsExporter
from retsu.domain.state import StateSnapshot

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "retsu-dashboard.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTS = ROOT / "deploy" / "prometheus" / "retsu-alerts.yml"

# Series Prometheus itself adds to every target.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
    | {"and", "or", "unless", "offset", "atan2", "inf", "nan", "Inf", "NaN"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, labels or keywords)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        token = match.group(0)
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation operator
        if token in _KEYWORDS or token.startswith("$"):
            continue
        if match.start() > 0 and text[match.start() - 1] in "$.0123456789":
            continue  # a Grafana variable, or the exponent/unit of a number
        names.add(token)
    return names


def exported_names() -> set[str]:
    """Every series name a Retsu process can expose (the collector leader included)."""
    metrics = Metrics()
    exporter = StateMetricsExporter(metrics, ManualClock())
    exporter.leadership_acquired()
    exporter.publish(StateSnapshot(taken_at=datetime(2030, 1, 1, tzinfo=UTC), priorities=()))
    names: set[str] = set()
    for family in metrics.registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
        else:
            names.add(family.name)
    return names


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _dashboard_expressions() -> list[str]:
    dashboard = _dashboard()
    expressions = [
        target["expr"] for panel in _panels(dashboard) for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable["type"] == "query" and isinstance(query, str):
            # label_values(metric, label): the metric is the first argument.
            match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
            assert match, query
            expressions.append(match.group(1))
    return expressions


def _alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


# -- the extractor itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (
            'sum by (route) (rate(http_server_requests_total{job=~"$job"}[$__rate_interval]))',
            {"http_server_requests_total"},
        ),
        ('histogram_quantile(0.95, sum by (le, op) (rate(a_bucket{x="1"}[5m])))', {"a_bucket"}),
        ("sum(rate(a_total[5m])) / sum(rate(b_total[5m])) > 0.01", {"a_total", "b_total"}),
        ("absent(some_gauge)", {"some_gauge"}),
        ('max(x) by (queue_name) > 1e3 and on(job) y{a="b c"}', {"x", "y"}),
    ],
)
def test_metric_names_are_extracted_from_promql(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


# -- the dashboard ---------------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    panels = list(_panels(dashboard))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in occupied, f"{panel['title']} overlaps another panel"
                occupied.add((x, y))
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            ref_ids = [target["refId"] for target in panel["targets"]]
            assert len(ref_ids) == len(set(ref_ids)), panel["title"]
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"datasource", "job", "queue"} <= variables


def test_every_metric_in_the_dashboard_is_one_retsu_exports() -> None:
    exported = exported_names()
    for expr in _dashboard_expressions():
        names = metric_names(expr)
        assert names, f"no metric found in {expr!r}"
        unknown = names - exported
        assert not unknown, f"{sorted(unknown)} in {expr!r} are not Retsu metrics"


def test_the_dashboard_shows_every_metric_family_retsu_exports() -> None:
    used = set().union(*(metric_names(expr) for expr in _dashboard_expressions()))
    families = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in used}
    for name in exported_names():
        if name.startswith(("process_", "python_")):
            continue  # prometheus-client's standard process and runtime collectors
        family = re.sub(r"_(total|bucket|count|sum)$", "", name)
        assert family in families, f"{family} is not on the dashboard"


def test_the_dashboard_covers_the_operators_questions() -> None:
    expressions = "\n".join(_dashboard_expressions())
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le, method, route)" in expressions
    assert 'status=~"5.."' in expressions  # error rate
    assert 'outcome="hit"' in expressions  # cache hit ratio
    assert "queue_state_collections_total" in expressions
    assert "queue_state_snapshot_age_seconds" in expressions


# -- Prometheus ------------------------------------------------------------------------


def test_prometheus_scrapes_the_api_and_every_worker() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"retsu-api", "retsu-worker"}
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"

    def targets(job: dict[str, Any]) -> list[str]:
        return [t for static in job["static_configs"] for t in static["targets"]]

    assert all(t.endswith(":2424") for t in targets(jobs["retsu-api"]))
    assert all(t.endswith(":24247") for t in targets(jobs["retsu-worker"]))
    roles = {s["labels"]["retsu_role"] for s in jobs["retsu-worker"]["static_configs"]}
    assert roles == {
        "worker:expired-message-cleaner",
        "worker:dead-letter-message-cleaner",
        "worker:state-metrics-collector",
        "worker:scheduler",
    }
    assert config["rule_files"] == [ALERTS.name]


def test_every_alert_uses_retsu_metrics() -> None:
    exported = exported_names() | PROMETHEUS_SERIES
    rules = _alert_rules()
    assert rules
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert not used - exported, f"{rule['alert']}: {sorted(used - exported)}"
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"]


def test_the_suggested_alerts_are_there() -> None:
    alerts = {rule["alert"]: rule["expr"] for rule in _alert_rules()}
    assert "absent(queue_state_snapshot_age_seconds)" in alerts["RetsuNoStateCollectorLeader"]
    assert "queue_messages_dead_lettered_total" in alerts["RetsuMessagesDeadLettered"]
    assert "queue_oldest_ready_message_age_seconds" in alerts["RetsuOldestReadyMessageTooOld"]
