"""Exact queue counts without scanning: the sharded state rollup.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Per queue, priority and shard (32 shards, picked from the last byte of the message
id so concurrent writers rarely touch the same counter row) the rollup holds the
number of physically READY and IN_FLIGHT messages and of dead letters.
Statement-level triggers with transition tables keep it exact in the same
transaction as every insert, update and delete; an update that changes no count
(a retry: IN_FLIGHT to IN_FLIGHT) writes nothing. Within one trigger, counter rows
are written in key order, so concurrent statements lock them in the same order; a
statement that fires several triggers (a dequeue that also dead-letters) can still
meet another in a cycle, and the repository retries the deadlock victim. A CHECK
makes any transaction that would drive a counter negative fail.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SHARD = "(get_byte(uuid_send({id}), 15) & 31)"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE queue_state_rollup (
            queue_id uuid NOT NULL,
            priority smallint NOT NULL,
            shard smallint NOT NULL,
            ready bigint NOT NULL DEFAULT 0,
            in_flight bigint NOT NULL DEFAULT 0,
            dead_letters bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (queue_id, priority, shard),
            CONSTRAINT queue_state_rollup_never_negative
                CHECK (ready >= 0 AND in_flight >= 0 AND dead_letters >= 0),
            CONSTRAINT queue_state_rollup_shard_range CHECK (shard BETWEEN 0 AND 31)
        ) WITH (fillfactor = 50)
        """
    )
    message_shard = SHARD.format(id="id")
    # Decrements and moves (UPDATE and DELETE statements): one grouped delta per
    # counter row, applied row by row in key order, so two transactions touching the
    # same counters lock them in the same order and cannot deadlock within one
    # trigger. The counter rows always exist here (the INSERT that made the message or
    # dead letter made them, and only a queue deletion removes them, after its
    # messages); a missing one, like a negative count, fails the transaction.
    apply_deltas = """
            FOR d IN
                SELECT queue_id, priority, shard::smallint AS shard,
                       sum(ready)::bigint AS ready, sum(in_flight)::bigint AS in_flight,
                       sum(dead_letters)::bigint AS dead_letters
                FROM ({changes})
                     AS change(queue_id, priority, shard, ready, in_flight, dead_letters)
                GROUP BY 1, 2, 3
                HAVING sum(ready) <> 0 OR sum(in_flight) <> 0 OR sum(dead_letters) <> 0
                ORDER BY 1, 2, 3
            LOOP
                UPDATE queue_state_rollup
                SET ready = ready + d.ready,
                    in_flight = in_flight + d.in_flight,
                    dead_letters = dead_letters + d.dead_letters
                WHERE queue_id = d.queue_id AND priority = d.priority AND shard = d.shard;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'queue_state_rollup has no row for queue %, priority %, '
                        'shard %', d.queue_id, d.priority, d.shard
                        USING ERRCODE = 'check_violation';
                END IF;
            END LOOP;
    """
    new_messages = (
        f"SELECT queue_id, priority, {message_shard}, (state = 1)::int, (state = 2)::int, 0 "
        "FROM new_rows"
    )
    old_messages = (
        f"SELECT queue_id, priority, {message_shard}, -(state = 1)::int, -(state = 2)::int, 0 "
        "FROM old_rows"
    )
    op.execute(
        f"""
        CREATE FUNCTION queue_message_rollup() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            d record;
        BEGIN
            IF TG_OP = 'INSERT' THEN
                -- Only positive deltas: one upsert in key order.
                INSERT INTO queue_state_rollup AS r (queue_id, priority, shard, ready, in_flight)
                SELECT queue_id, priority, {message_shard},
                       count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2)
                FROM new_rows
                GROUP BY 1, 2, 3
                ORDER BY 1, 2, 3
                ON CONFLICT (queue_id, priority, shard) DO UPDATE
                SET ready = r.ready + excluded.ready, in_flight = r.in_flight + excluded.in_flight;
            ELSIF TG_OP = 'DELETE' THEN
                {apply_deltas.format(changes=old_messages)}
            ELSE
                {apply_deltas.format(changes=new_messages + " UNION ALL " + old_messages)}
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    old_dead_letters = f"SELECT queue_id, priority, {message_shard}, 0, 0, -1 FROM old_rows"
    op.execute(
        f"""
        CREATE FUNCTION queue_dead_letter_rollup() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            d record;
        BEGIN
            IF TG_OP = 'INSERT' THEN
                INSERT INTO queue_state_rollup AS r (queue_id, priority, shard, dead_letters)
                SELECT queue_id, priority, {message_shard}, count(*)
                FROM new_rows
                GROUP BY 1, 2, 3
                ORDER BY 1, 2, 3
                ON CONFLICT (queue_id, priority, shard) DO UPDATE
                SET dead_letters = r.dead_letters + excluded.dead_letters;
            ELSE
                {apply_deltas.format(changes=old_dead_letters)}
            END IF;
            RETURN NULL;
        END
        $$
        """
    )

    # No writer may slip between the backfill and the triggers.
    op.execute("LOCK TABLE queue_message, queue_dead_letter_message IN SHARE ROW EXCLUSIVE MODE")
    for event, transition in (
        ("INSERT", "NEW TABLE AS new_rows"),
        ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
        ("DELETE", "OLD TABLE AS old_rows"),
    ):
        op.execute(
            f"CREATE TRIGGER queue_message_rollup_{event.lower()} AFTER {event} ON queue_message "
            f"REFERENCING {transition} FOR EACH STATEMENT EXECUTE FUNCTION queue_message_rollup()"
        )
    for event, transition in (
        ("INSERT", "NEW TABLE AS new_rows"),
        ("DELETE", "OLD TABLE AS old_rows"),
    ):
        op.execute(
            f"CREATE TRIGGER queue_dead_letter_rollup_{event.lower()} "
            f"AFTER {event} ON queue_dead_letter_message "
            f"REFERENCING {transition} FOR EACH STATEMENT "
            "EXECUTE FUNCTION queue_dead_letter_rollup()"
        )
    op.execute(
        f"""
        INSERT INTO queue_state_rollup (queue_id, priority, shard, ready, in_flight, dead_letters)
        SELECT queue_id, priority, shard, sum(ready), sum(in_flight), sum(dead_letters)
        FROM (
            SELECT queue_id, priority, {message_shard} AS shard,
                   (state = 1)::int AS ready, (state = 2)::int AS in_flight, 0 AS dead_letters
            FROM queue_message
            UNION ALL
            SELECT queue_id, priority, {message_shard}, 0, 0, 1
            FROM queue_dead_letter_message
        ) AS existing
        GROUP BY 1, 2, 3
        """
    )


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
