"""The chaos script's accounting (bench/chaos): what it calls lost, duplicated or late.

The script itself is run by hand (`python -m bench.chaos`); these tests pin down the
rules its verdict rests on, so a failing invariant means the system failed, not the
bookkeeping.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.chaos.checks import StatsCheck
from bench.chaos.load import LEASE_MARGIN_SECONDS, Delivery, Ledger, Outcome
from bench.chaos.report import FaultRecord, render, windows

LEASE = 15.0


def delivery(message_id: str, number: int, requested_at: float) -> Delivery:
    return Delivery(message_id, number, 1, requested_at, requested_at + 0.01, "handle")


def enqueue_outcome(at: float, ok: bool) -> Outcome:
    return Outcome(at, "enqueue", "api-1", ok, None if ok else "503 database_unavailable")


def test_an_acknowledged_enqueue_never_delivered_is_lost() -> None:
    ledger = Ledger(LEASE)
    ledger.enqueue_acknowledged(1, "m1", replayed=False)
    ledger.enqueue_acknowledged(2, "m2", replayed=False)
    ledger.delivered(delivery("m1", 1, time.monotonic()))
    assert ledger.lost() == [2]


def test_a_replay_with_the_same_id_is_not_a_second_message() -> None:
    ledger = Ledger(LEASE)
    ledger.enqueue_acknowledged(7, "m7", replayed=False)
    ledger.enqueue_acknowledged(7, "m7", replayed=True)
    assert ledger.replays == 1 and not ledger.stored_twice


def test_one_number_under_two_message_ids_is_stored_twice() -> None:
    ledger = Ledger(LEASE)
    ledger.enqueue_acknowledged(7, "m7", replayed=False)
    ledger.enqueue_acknowledged(7, "m7-bis", replayed=True)
    now = time.monotonic()
    ledger.delivered(delivery("m8", 8, now))
    ledger.delivered(delivery("m8-bis", 8, now))
    assert [entry[0] for entry in ledger.stored_twice] == [7, 8]


def test_a_delivery_after_a_confirmed_acknowledgement_within_the_lease_is_a_violation() -> None:
    ledger = Ledger(LEASE)
    first = delivery("m1", 1, time.monotonic())
    ledger.delivered(first)
    ledger.acknowledgement_confirmed(first, sent_at=first.received_at + 0.1)
    ledger.delivered(delivery("m1", 1, time.monotonic() + 1))
    assert ledger.delivered_after_ack == [("m1", 1)]


def test_a_redelivery_after_an_unconfirmed_or_late_acknowledgement_is_allowed() -> None:
    ledger = Ledger(LEASE)
    now = time.monotonic()
    unconfirmed = delivery("m1", 1, now)
    ledger.delivered(unconfirmed)
    ledger.delivered(delivery("m1", 1, now + LEASE + 1))
    late = delivery("m2", 2, now)
    ledger.delivered(late)
    # Sent when the lease was (almost) over: the 204 may be the idempotent answer to a
    # stale handle, so the message may legitimately come back.
    ledger.acknowledgement_confirmed(late, sent_at=late.received_at + LEASE - LEASE_MARGIN_SECONDS)
    ledger.delivered(delivery("m2", 2, time.monotonic() + 1))
    assert ledger.delivered_after_ack == []
    assert ledger.redelivered_before_ack() == 2


def test_errors_long_after_a_fault_or_during_a_redis_outage_fail_the_run() -> None:
    ledger = Ledger(LEASE)
    faults = [
        FaultRecord("postgres-restart", started=10.0, ended=11.0),
        FaultRecord("redis-stop", started=30.0, ended=50.0),
    ]
    spans = [(w.label, w.start, w.end) for w in windows(faults, 60.0, recovery=5.0)]
    assert spans == [
        ("before any fault", 0.0, 10.0),
        ("postgres-restart: during", 10.0, 11.0),
        ("postgres-restart: after", 11.0, 30.0),
        ("redis-stop: during", 30.0, 50.0),
        ("redis-stop: after", 50.0, 60.0),
    ]
    for at, ok in ((10.5, False), (15.0, False), (12.0, True), (40.0, False)):
        ledger.outcomes.append(enqueue_outcome(at, ok))
    text, verdict = render(
        header=[],
        ledger=ledger,
        faults=faults,
        load_end=60.0,
        recovery=5.0,
        ready_target=5.0,
        exits=[],
        checks=[],
        undelivered_stored=0,
        drain_seconds=1.0,
    )
    # 10.5 s is within the restart; 15.0 s is 4 s after it ended (allowed); 40.0 s is
    # during the Redis outage (never allowed).
    assert verdict.failures == [
        "1 client errors at all during a Redis outage (redis-stop: during, 40.0-40.0 s)"
    ]
    assert "messages lost                                 0" in text


def test_stats_match_only_when_every_count_matches_per_priority() -> None:
    truth = {
        "HIGH": {"ready": 2, "in_flight": 1, "delayed": 0, "dead_letters": 0},
        "MEDIUM": {"ready": 0, "in_flight": 0, "delayed": 3, "dead_letters": 0},
        "LOW": {"ready": 1, "in_flight": 0, "delayed": 0, "dead_letters": 1},
    }
    good = StatsCheck(
        "x",
        truth,
        api={"ready": 3, "in_flight": 1, "delayed": 3, "dead_letters": 1},
        api_error=None,
        gauges={
            "HIGH": {"ready": 2, "in_flight": 1},
            "MEDIUM": {"ready": 0, "in_flight": 0},
            "LOW": {"ready": 1, "in_flight": 0},
        },
        gauges_source="collector-1",
    )
    assert good.api_matches and good.gauges_match
    # Right totals, wrong priorities: the gauges are compared per priority.
    swapped = StatsCheck(
        "x",
        truth,
        api={"ready": 3, "in_flight": 1, "delayed": 2, "dead_letters": 1},
        api_error=None,
        gauges={
            "HIGH": {"ready": 1, "in_flight": 1},
            "MEDIUM": {"ready": 1, "in_flight": 0},
            "LOW": {"ready": 1, "in_flight": 0},
        },
        gauges_source="collector-1",
    )
    assert not swapped.api_matches and not swapped.gauges_match


def test_the_failover_fault_is_opt_in_and_brings_a_standby_instead_of_pgbouncer() -> None:
    from bench.chaos.__main__ import Run, build_parser, default_faults

    assert "primary-failover" not in default_faults(with_pgbouncer=True)
    plain = build_parser().parse_args([])
    assert not Run.wants_standby(plain)
    failover = build_parser().parse_args(["--faults", "api-kill,primary-failover"])
    assert Run.wants_standby(failover)
    assert not Run.wants_pgbouncer(failover)  # PgBouncer points at one server
    assert failover.standby == "sync"


def test_the_topology_names_every_node_in_one_url_that_survives_the_failover(
    tmp_path: Path,
) -> None:
    from bench.chaos.topology import PrivatePostgres, Topology

    primary = PrivatePostgres(tmp_path, tmp_path, "primary")
    standby = PrivatePostgres(tmp_path, tmp_path, "standby")
    topology = Topology(tmp_path, primary, None, None, standby=standby)  # type: ignore[arg-type]
    before = topology.direct_url
    assert before == (
        f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        "/retsu_chaos?target_session_attrs=read-write"
    )
    topology.promoted()
    assert topology.postgres is standby and topology.standby is None
    assert topology.direct_url == before
