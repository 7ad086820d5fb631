"""Exact stats against the truth: ``GET /v1/queues/{id}`` and the collector's gauges
compared with a ``count(*)`` over the message tables, per priority.

The counting rules are SPEC §3.2's, written here as plain scans on purpose (the API
and the collector read the rollup plus corrections; this reads every row):
ready = unexpired and deliverable now (never delivered and past any delay, or an
elapsed lease with attempts left); in flight = an active lease; delayed = never
delivered and still inside its delay.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

PRIORITY_NAMES = {3: "HIGH", 2: "MEDIUM", 1: "LOW"}

# Physical states (migration 0005): 1 READY, 2 IN_FLIGHT (an elapsed lease stays 2),
# 3 DELAYED (inside its first delay; an ended delay stays 3 until a claim moves it).
TRUTH = """
SELECT p.priority,
  (SELECT count(*) FROM queue_message m
    WHERE m.queue_id = $1 AND m.priority = p.priority AND m.expires_at > now()
      AND ((m.state = 1 AND m.delivery_attempts < q.max_delivery_attempts)
        OR (m.state = 2 AND m.available_after <= now()
            AND m.delivery_attempts < q.max_delivery_attempts)
        OR (m.state = 3 AND m.available_after <= now()))) AS ready,
  (SELECT count(*) FROM queue_message m
    WHERE m.queue_id = $1 AND m.priority = p.priority AND m.state = 2
      AND m.available_after > now()) AS in_flight,
  (SELECT count(*) FROM queue_message m
    WHERE m.queue_id = $1 AND m.priority = p.priority AND m.state = 3
      AND m.available_after > now()) AS delayed,
  (SELECT count(*) FROM queue_dead_letter_message d
    WHERE d.queue_id = $1 AND d.priority = p.priority) AS dead_letters
FROM queue q CROSS JOIN (VALUES (1::smallint), (2::smallint), (3::smallint)) AS p(priority)
WHERE q.id = $1
"""

STATE_FIELDS = ("ready", "in_flight", "delayed", "dead_letters")


@dataclass
class StatsCheck:
    label: str
    truth: dict[str, dict[str, int]]  # priority -> field -> count
    api: dict[str, int] | None
    api_error: str | None
    gauges: dict[str, dict[str, int]] | None  # priority -> ready/in_flight
    gauges_source: str | None

    def truth_totals(self) -> dict[str, int]:
        return {f: sum(p[f] for p in self.truth.values()) for f in STATE_FIELDS}

    @property
    def api_matches(self) -> bool:
        return self.api is not None and all(
            self.api.get(f) == self.truth_totals()[f] for f in STATE_FIELDS
        )

    @property
    def gauges_match(self) -> bool:
        return self.gauges is not None and all(
            self.gauges.get(priority, {}).get(f) == self.truth[priority][f]
            for priority in self.truth
            for f in ("ready", "in_flight")
        )


async def truth(database_url: str, queue_id: str) -> dict[str, dict[str, int]]:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(TRUTH, queue_id)
    finally:
        await connection.close()
    return {PRIORITY_NAMES[row["priority"]]: {f: int(row[f]) for f in STATE_FIELDS} for row in rows}


async def api_stats(
    client: httpx.AsyncClient, base: str, queue_id: str
) -> tuple[dict[str, int] | None, str | None]:
    try:
        response = await client.get(f"{base}/v1/queues/{queue_id}")
    except httpx.HTTPError as error:
        return None, type(error).__name__
    if response.status_code != 200:
        return None, f"HTTP {response.status_code}"
    stats = response.json()["stats"]
    return {f: int(stats[f]) for f in STATE_FIELDS}, None


@dataclass
class Scrape:
    gauges: dict[str, dict[str, int]]
    snapshot_age: float


async def scrape_leader(
    client: httpx.AsyncClient, metrics_urls: dict[str, str], queue_name: str
) -> tuple[str, Scrape] | None:
    """The collector exporting state gauges for the queue (the leader), if any answers."""
    for name, url in metrics_urls.items():
        try:
            response = await client.get(url, timeout=2)
        except httpx.HTTPError:
            continue
        if response.status_code != 200:
            continue
        gauges: dict[str, dict[str, int]] = {}
        age: float | None = None
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == "queue_state_snapshot_age_seconds":
                    age = sample.value
                field_name = {
                    "queue_messages_ready": "ready",
                    "queue_messages_in_flight": "in_flight",
                }.get(sample.name)
                if field_name and sample.labels.get("queue_name") == queue_name:
                    priority = sample.labels["message_priority"]
                    gauges.setdefault(priority, {})[field_name] = int(sample.value)
        if gauges and age is not None:
            return name, Scrape(gauges, age)
    return None


async def check_stats(
    label: str,
    client: httpx.AsyncClient,
    database_url: str,
    api_base: str,
    queue_id: str,
    queue_name: str,
    collector_metrics: dict[str, str],
    quiet_since: float,
    collector_wait: float,
) -> StatsCheck:
    """Wait for a collector snapshot taken after ``quiet_since`` (monotonic), then read
    the gauges, the API's stats and the truth, in that order, with no traffic running."""
    deadline = time.monotonic() + collector_wait
    leader: tuple[str, Scrape] | None = None
    while time.monotonic() < deadline:
        leader = await scrape_leader(client, collector_metrics, queue_name)
        if leader is not None and leader[1].snapshot_age < time.monotonic() - quiet_since - 0.5:
            break
        leader = None
        await asyncio.sleep(0.5)
    api, api_error = await api_stats(client, api_base, queue_id)
    counted = await truth(database_url, queue_id)
    return StatsCheck(
        label=label,
        truth=counted,
        api=api,
        api_error=api_error,
        gauges=leader[1].gauges if leader else None,
        gauges_source=leader[0] if leader else None,
    )
