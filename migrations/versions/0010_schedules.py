"""Schedules: recurring messages (SPEC §3.12).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-08

* ``queue_schedule``: a queue's schedules, unique by name within the queue, gone with the
  queue (``ON DELETE CASCADE``). Exactly one of ``cron`` and ``every_seconds``; the
  message template (``payload``, ``priority``, ``ttl_seconds``, ``group_key``) with the
  CHECKs of the message's own ranges; ``next_run_at`` is NULL exactly while paused.
* ``queue_schedule_due``: the scheduler's claim walks it, earliest due first
  (``ORDER BY next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED``), and stops at the first row no
  other scheduler holds.

The enqueue itself is ``retsu_enqueue`` (migrations 0007, 0009), called by the scheduler in the
transaction that claims and advances the schedule (adapters/postgres/schedules.py).
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

SCHEMA = """
CREATE TABLE queue_schedule (
    id uuid PRIMARY KEY,
    queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
    name text COLLATE "C" NOT NULL
        CONSTRAINT queue_schedule_name_length CHECK (length(name) BETWEEN 1 AND 64),
    cron text,
    every_seconds integer
        CONSTRAINT queue_schedule_every_seconds_range
        CHECK (every_seconds BETWEEN 1 AND 2592000),
    timezone text NOT NULL DEFAULT 'UTC',
    payload text NOT NULL,
    priority smallint NOT NULL
        CONSTRAINT queue_schedule_priority_range CHECK (priority BETWEEN 1 AND 3),
    ttl_seconds integer
        CONSTRAINT queue_schedule_ttl_range CHECK (ttl_seconds BETWEEN 1 AND 2592000),
    group_key text
        CONSTRAINT queue_schedule_group_length CHECK (length(group_key) BETWEEN 1 AND 128),
    paused boolean NOT NULL DEFAULT false,
    next_run_at timestamptz,
    last_run_at timestamptz,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT queue_schedule_one_recurrence CHECK ((cron IS NULL) <> (every_seconds IS NULL)),
    CONSTRAINT queue_schedule_due_unless_paused CHECK (paused = (next_run_at IS NULL)),
    CONSTRAINT queue_schedule_name_unique UNIQUE (queue_id, name)
);

CREATE INDEX queue_schedule_due ON queue_schedule (next_run_at) WHERE NOT paused
"""


def upgrade() -> None:
    for statement in SCHEMA.split(";\n"):
        if statement.strip():
            op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
