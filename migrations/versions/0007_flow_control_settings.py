"""Queue settings for flow control and history; a message's group and schedule.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

* ``queue``: ``group_max_in_flight`` (1: a group is an ordered lane), ``max_in_flight``
  (a cap on the queue's active leases), two token buckets (``rate_*`` for the queue,
  ``group_rate_*`` for each group: both columns set or neither), and
  ``completed_retention_seconds`` (SPEC §3.10, §3.11), each with the CHECK of its range.
* ``queue_message.group_key`` (SPEC §3.10) and ``schedule_id`` (§3.12);
  ``queue_dead_letter_message.group_key`` (a redrive keeps the group).
* ``retsu_enqueue`` takes the groups and the schedule ids of the messages it stores.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

READY, DELAYED = 1, 3

PINNED = (
    "SET enable_seqscan = off SET enable_bitmapscan = off "
    "SET plan_cache_mode = force_generic_plan SET jit = off"
)

SCHEMA = """
ALTER TABLE queue
    ADD COLUMN group_max_in_flight integer NOT NULL DEFAULT 1
        CONSTRAINT queue_group_max_in_flight_range CHECK (group_max_in_flight BETWEEN 1 AND 10000),
    ADD COLUMN max_in_flight integer
        CONSTRAINT queue_max_in_flight_range CHECK (max_in_flight BETWEEN 1 AND 1000000),
    ADD COLUMN rate_per_second double precision,
    ADD COLUMN rate_burst integer,
    ADD COLUMN group_rate_per_second double precision,
    ADD COLUMN group_rate_burst integer,
    ADD COLUMN completed_retention_seconds integer NOT NULL DEFAULT 0
        CONSTRAINT queue_completed_retention_range
        CHECK (completed_retention_seconds BETWEEN 0 AND 604800),
    ADD CONSTRAINT queue_rate_limit_valid CHECK (
        (rate_per_second IS NULL AND rate_burst IS NULL)
        OR (rate_per_second BETWEEN 0.01 AND 100000 AND rate_burst BETWEEN 1 AND 100000)),
    ADD CONSTRAINT queue_group_rate_limit_valid CHECK (
        (group_rate_per_second IS NULL AND group_rate_burst IS NULL)
        OR (group_rate_per_second BETWEEN 0.01 AND 100000
            AND group_rate_burst BETWEEN 1 AND 100000));

ALTER TABLE queue_message
    ADD COLUMN group_key text
        CONSTRAINT queue_message_group_length CHECK (length(group_key) BETWEEN 1 AND 128),
    ADD COLUMN schedule_id uuid;

ALTER TABLE queue_dead_letter_message
    ADD COLUMN group_key text
"""

# As migration 0005's, with each message's group and schedule.
ENQUEUE = f"""
CREATE FUNCTION retsu_enqueue(
    p_queue_id uuid, p_ids uuid[], p_payloads text[], p_priorities smallint[],
    p_ttls integer[], p_delays integer[], p_groups text[] DEFAULT NULL,
    p_schedule_ids uuid[] DEFAULT NULL, p_redriven_from uuid[] DEFAULT NULL)
RETURNS TABLE (queue_found boolean, invalid_delay_at integer)
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_default_ttl integer;
    v_bad bigint;
BEGIN
    SELECT q.default_message_ttl_seconds,
           (SELECT m.o FROM unnest(p_ttls, p_delays) WITH ORDINALITY AS m(ttl, delay, o)
            WHERE m.delay >= coalesce(m.ttl, q.default_message_ttl_seconds)
            ORDER BY m.o LIMIT 1)
    INTO v_default_ttl, v_bad
    FROM queue AS q WHERE q.id = p_queue_id
    -- What the foreign key takes anyway, taken first: a queue being deleted makes the
    -- enqueue wait here, before it holds any counter row, then find the queue gone.
    FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::integer;
        RETURN;
    END IF;
    IF v_bad IS NOT NULL THEN
        RETURN QUERY SELECT true, v_bad::integer;
        RETURN;
    END IF;
    WITH stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts, redriven_from, group_key, schedule_id)
        SELECT m.id, p_queue_id, m.payload, m.priority,
               CASE WHEN m.delay > 0 THEN {DELAYED} ELSE {READY} END, now(),
               now() + make_interval(secs => coalesce(m.ttl, v_default_ttl)),
               now() + make_interval(secs => m.delay), 0, p_redriven_from[m.o],
               p_groups[m.o], p_schedule_ids[m.o]
        FROM unnest(p_ids, p_payloads, p_priorities, p_ttls, p_delays)
             WITH ORDINALITY AS m(id, payload, priority, ttl, delay, o)
        ORDER BY m.o
        RETURNING id, priority, state
    )
    INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, delayed, enqueued)
    SELECT p_queue_id, s.priority, retsu_shard(s.id),
           count(*) FILTER (WHERE s.state = {READY}),
           count(*) FILTER (WHERE s.state = {DELAYED}), count(*)
    FROM stored AS s
    GROUP BY 2, 3
    ORDER BY 2, 3
    ON CONFLICT (queue_id, priority, shard) DO UPDATE
    SET ready = c.ready + excluded.ready, delayed = c.delayed + excluded.delayed,
        enqueued = c.enqueued + excluded.enqueued;
    RETURN QUERY SELECT true, NULL::integer;
END
$$;
"""


def upgrade() -> None:
    for statement in SCHEMA.split(";\n"):
        if statement.strip():
            op.execute(statement)
    op.execute(
        "DROP FUNCTION retsu_enqueue("
        "uuid, uuid[], text[], smallint[], integer[], integer[], uuid[])"
    )
    op.execute(ENQUEUE)


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
