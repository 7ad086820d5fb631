"""Exact queue counts without scanning: the sharded state rollup.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Per queue, priority and shard (32 shards, picked from the last byte of the message
id so concurrent writers rarely touch the same counter row) the rollup holds the
number of physically READY and IN_FLIGHT messages and of dead letters.
Statement-level triggers with transition tables keep it exact in the same
transaction as every insert, update and delete; an update that changes no count
(a retry: IN_FLIGHT to IN_FLIGHT) writes nothing. Counter rows are upserted in key
order so concurrent transactions lock them in the same order (no deadlocks), and
a CHECK makes any transaction that would drive a counter negative fail.
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
    # Applies counter deltas. Existing counter rows are locked in key order first, so
    # two transactions touching the same counters cannot deadlock; then they are
    # updated, and only keys that have no row yet are inserted. (An upsert cannot
    # carry a negative delta: PostgreSQL checks the CHECK on the proposed row first.)
    op.execute(
        """
        CREATE FUNCTION queue_state_rollup_apply(
            d_queue uuid[], d_priority smallint[], d_shard smallint[],
            d_ready bigint[], d_in_flight bigint[], d_dead_letters bigint[]
        ) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM 1
            FROM queue_state_rollup AS r
            JOIN unnest(d_queue, d_priority, d_shard) AS d(queue_id, priority, shard)
              ON r.queue_id = d.queue_id AND r.priority = d.priority AND r.shard = d.shard
            ORDER BY r.queue_id, r.priority, r.shard
            FOR UPDATE OF r;

            UPDATE queue_state_rollup AS r
            SET ready = r.ready + d.ready,
                in_flight = r.in_flight + d.in_flight,
                dead_letters = r.dead_letters + d.dead_letters
            FROM unnest(d_queue, d_priority, d_shard, d_ready, d_in_flight, d_dead_letters)
                 AS d(queue_id, priority, shard, ready, in_flight, dead_letters)
            WHERE r.queue_id = d.queue_id AND r.priority = d.priority AND r.shard = d.shard;

            INSERT INTO queue_state_rollup AS r
                (queue_id, priority, shard, ready, in_flight, dead_letters)
            SELECT d.queue_id, d.priority, d.shard, d.ready, d.in_flight, d.dead_letters
            FROM unnest(d_queue, d_priority, d_shard, d_ready, d_in_flight, d_dead_letters)
                 AS d(queue_id, priority, shard, ready, in_flight, dead_letters)
            WHERE NOT EXISTS (
                SELECT 1 FROM queue_state_rollup AS x
                WHERE x.queue_id = d.queue_id AND x.priority = d.priority AND x.shard = d.shard
            )
            ORDER BY 1, 2, 3
            ON CONFLICT (queue_id, priority, shard) DO UPDATE
            SET ready = r.ready + excluded.ready,
                in_flight = r.in_flight + excluded.in_flight,
                dead_letters = r.dead_letters + excluded.dead_letters;
        END
        $$
        """
    )
    message_shard = SHARD.format(id="id")
    # The deltas of one statement, grouped per counter row, zero rows dropped.
    apply_deltas = """
            PERFORM queue_state_rollup_apply(
                array_agg(queue_id ORDER BY queue_id, priority, shard),
                array_agg(priority ORDER BY queue_id, priority, shard),
                array_agg(shard ORDER BY queue_id, priority, shard),
                array_agg(ready ORDER BY queue_id, priority, shard),
                array_agg(in_flight ORDER BY queue_id, priority, shard),
                array_agg(dead_letters ORDER BY queue_id, priority, shard))
            FROM (
                SELECT queue_id, priority, shard::smallint AS shard,
                       sum(ready)::bigint AS ready, sum(in_flight)::bigint AS in_flight,
                       sum(dead_letters)::bigint AS dead_letters
                FROM ({changes})
                     AS change(queue_id, priority, shard, ready, in_flight, dead_letters)
                GROUP BY 1, 2, 3
                HAVING sum(ready) <> 0 OR sum(in_flight) <> 0 OR sum(dead_letters) <> 0
            ) AS delta
            HAVING count(*) > 0;
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
