"""Storage parameters for the tables a queue churns: where an update can be HOT, room on
the page for it; autovacuum early and unthrottled where dead rows pile up.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08

Which updates can be HOT (heap-only: no new index entry, the old version pruned with the
page, not by vacuum): only those that change no indexed column, where PostgreSQL counts
every column of every index's key *and predicate*. So, table by table (SPEC §10):

* ``queue_message``: none. A claim changes ``state`` (in the predicate of the ready, lease,
  delay, retry and expiry indexes), ``available_after`` (a key of the lease and delay
  indexes) and ``delivery_attempts`` (the retry index); a visibility change moves
  ``available_after``; an acknowledgement deletes. Migration 0001's fillfactor 80 stays:
  the room it leaves is where a claim's new (non-HOT) version lands, on the page of the old
  one, so a claim writes one heap page instead of two (measured below). Its autovacuum
  thresholds (1 % + 500 dead rows) stay too; what changes is that autovacuum no longer
  sleeps while it cleans this table (``autovacuum_vacuum_cost_delay = 0``): every dead row
  left at the head of the claim index is walked by every claim, so the sooner vacuum is
  through, the better; in steady state the table is small and one pass is quick.
* ``queue_state_rollup``: every update is HOT (the counters are not indexed) and each
  claim, acknowledgement and enqueue updates a row. Fillfactor 50 → 20: more versions fit
  on a counter row's page between two prunes before an update has to leave it (and add an
  index entry); the table stays tiny (96 rows a queue). Vacuum it by a fixed number of dead
  rows (scale factor 0: the live row count says nothing about its churn), unthrottled.
* ``queue_dead_letter_message``, ``idempotency_key``, ``queue_consumer``: rows deleted in
  batches by the cleaners (and consumers' sightings rewritten, not HOT: ``last_seen_at``
  is indexed); vacuumed at 5 % dead rather than the default 20 %.
* ``queue_group`` (migration 0009's lanes): every claim and acknowledgement of a grouped
  message updates its group's row; an update is HOT unless it moves ``head_key`` (a key of
  the live-groups index) or the row in or out of that index's predicate (a group's first
  or last live message). Fillfactor 50 and vacuum by a fixed number of dead rows,
  unthrottled, as the counters. ``queue_rate_bucket`` (one row per rate-limited queue, every
  claim of it updates it, never indexed beyond its key): as the counters.
* ``queue_history``, ``audit_log``, ``queue``, ``server_secret``, ``queue_schedule``:
  defaults (append-mostly, or rarely written).

``ALTER TABLE … SET (…)`` of these parameters takes a SHARE UPDATE EXCLUSIVE lock: it does
not block reads or writes, only another vacuum or schema change of the table. A fillfactor
applies to pages filled from now on.
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

STORAGE: dict[str, dict[str, int | float]] = {
    "queue_message": {"autovacuum_vacuum_cost_delay": 0},
    "queue_state_rollup": {
        "fillfactor": 20,
        "autovacuum_vacuum_scale_factor": 0,
        "autovacuum_vacuum_threshold": 1000,
        "autovacuum_vacuum_cost_delay": 0,
    },
    "queue_group": {
        "fillfactor": 50,
        "autovacuum_vacuum_scale_factor": 0,
        "autovacuum_vacuum_threshold": 1000,
        "autovacuum_vacuum_cost_delay": 0,
    },
    "queue_rate_bucket": {
        "fillfactor": 20,
        "autovacuum_vacuum_scale_factor": 0,
        "autovacuum_vacuum_threshold": 1000,
        "autovacuum_vacuum_cost_delay": 0,
    },
    "queue_dead_letter_message": {"autovacuum_vacuum_scale_factor": 0.05},
    "idempotency_key": {"autovacuum_vacuum_scale_factor": 0.05},
    "queue_consumer": {"autovacuum_vacuum_scale_factor": 0.05},
}


def upgrade() -> None:
    for table, parameters in STORAGE.items():
        settings = ", ".join(f"{name} = {value}" for name, value in parameters.items())
        op.execute(f"ALTER TABLE {table} SET ({settings})")


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
