"""What every enqueue paid for nothing (SPEC §7b: Retsu's SQL-floor enqueue against the
minimal floor, and the single HTTP enqueue against PgQueuer): a foreign-key trigger, table
CHECK constraints that PostgreSQL parses again on every statement, and three statements
where one does.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04

Measured with the SQL floor's single enqueue (``retsu_enqueue`` from an asyncpg pool, 20
connections, 32 clients, 512-byte payloads; PostgreSQL's CPU a message, several alternating
runs of 6 s each on a database copied from a migrated one; docs/performance.md, "The
enqueue inside PostgreSQL"): 280–290 µs as migration 0016 left it, of which the rollup's
upsert is ~32 µs, the commit's WAL flush ~12 % and the executor's start-up of the statements
~16 %.

**1. No foreign key from ``queue_message`` to ``queue``.** Its check is an AFTER trigger
per inserted row that runs ``SELECT 1 FROM queue … FOR KEY SHARE`` through SPI: ~10 µs a
single enqueue. Every path that stores a message already goes through ``retsu_enqueue``,
which takes that same lock on the queue's row first (``FOR KEY SHARE``, migration 0009) and
answers "queue not found" when the row is gone; a queue's deletion locks the row
``FOR UPDATE`` and deletes its messages itself before the row
(``adapters/postgres/queues.py``). So an enqueue either holds the lock before the deletion
(the deletion waits for its commit, then deletes the message) or waits behind it and finds
the queue gone: no message outlives its queue. The cascade was never used for messages.

**2. CHECK constraints become domains where they test one column.** PostgreSQL 15 reads a
table's CHECK constraints from their stored text (``stringToNode``) again for each
statement that inserts or updates a row (``ExecRelCheck`` builds them per result relation);
``perf`` put that at 5 % of the backends' CPU under single enqueues, ~15 µs an enqueue for
``queue_message``'s six and ~10 µs for the counter row's two. A domain's constraint is kept
parsed in the backend's type cache and checked only where a value of that column is
assigned. So, with the same rules and the same error (SQLSTATE 23514, check_violation):

* the counters of ``queue_state_rollup`` (``ready``, ``in_flight``, ``delayed``,
  ``dead_letters``, ``completed``, ``groups``) are ``retsu_counter`` (bigint, never below
  zero) and its ``shard`` is ``retsu_shard_number`` (0–31);
* ``queue_message``'s ``priority`` is ``retsu_priority_level`` (1–3), ``state``
  ``retsu_state_code`` (1–7), ``delivery_attempts`` ``retsu_attempt_count`` (never below
  zero), ``group_key`` ``retsu_group_key`` (1–128 characters).

The two constraints across columns (``expires_at > enqueued_at``; an IN_FLIGHT row has a
receipt handle) cannot be domains; they are dropped. Only Retsu's functions write these
columns: the lifetime is at least 1 s (checked by the API, the SQL interface and the
function's own delay test) and every claim sets a fresh handle. The contract tests assert
both on every table they leave behind (``assert_message_invariants`` in
``tests/support/postgres.py``).

**3. One statement for an enqueue without groups.** ``retsu_enqueue`` read the queue's row,
then tested the batch for groups with a subquery, then stored and counted, then built its
answer with ``RETURN QUERY``: four executor runs. Now a batch without groups (the test is
a plain expression, no query) is one statement: the queue's row (still first, still
``FOR KEY SHARE``, with the first delay not shorter than its lifetime), the messages stored
only when there is no such delay, the counters, and the answer. Grouped batches take the
code they took before.

Measured together (same harness, three alternating pairs): 280–289 → 252–261 µs of
PostgreSQL CPU a single enqueue (−10 %; the SQL floor 4,104–4,255 → 4,526–4,572 msg/s).

**What the upgrade costs on a large table.** The column changes take ACCESS EXCLUSIVE on
both tables, but rewrite neither: the domains get their rules only after the columns moved
onto them (a domain with a CHECK makes PostgreSQL rewrite the table). PostgreSQL still
rebuilds, under that lock, every index of ``queue_message`` whose key or predicate names a
changed column (11 of its 13; the primary key and ``enqueue_order``'s are kept), so the
pause grows with the stored messages. Measured on 500,000 ready messages (274 MB): 1.4 s
(2.6 s with the domains' rules given at creation, which rewrote the table). Then
``ANALYZE`` restores the statistics the type change dropped (docs/operations.md, "Rollout
order"; ``tests/integration/test_migration_0017.py``).

Tried and left out: sending the enqueue's one statement itself instead of calling the
function (another −35 µs, but behind a transaction pooler, where nothing is prepared, the
statement would be parsed and planned on every call, and the SQL interface calls the
function); counting enqueues in an append-only table folded into the counters later
(−22 µs: an INSERT instead of the upsert of a counter row, but ``ready`` could then go
below zero in the counter row, and every reader would sum both).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# The domains are created without their rules and the columns moved onto them first: a
# column's type changing to a domain over the same base type without constraints is binary
# coercible, so PostgreSQL keeps the table's files (a domain with a CHECK forces a rewrite
# of the whole table under ACCESS EXCLUSIVE; seen with pg_relation_filenode). The rules come
# after, NOT VALID: they hold for every value written from here on, and the rows already
# stored were held to the same rules by the table CHECKs dropped in the same transaction.
_DOMAINS = """
CREATE DOMAIN retsu_counter AS bigint;
CREATE DOMAIN retsu_shard_number AS smallint;
CREATE DOMAIN retsu_priority_level AS smallint;
CREATE DOMAIN retsu_state_code AS smallint;
CREATE DOMAIN retsu_attempt_count AS integer;
CREATE DOMAIN retsu_group_key AS text;
ALTER TABLE queue_state_rollup
    DROP CONSTRAINT queue_state_rollup_never_negative,
    DROP CONSTRAINT queue_state_rollup_shard_range,
    ALTER COLUMN shard TYPE retsu_shard_number,
    ALTER COLUMN ready TYPE retsu_counter,
    ALTER COLUMN in_flight TYPE retsu_counter,
    ALTER COLUMN delayed TYPE retsu_counter,
    ALTER COLUMN dead_letters TYPE retsu_counter,
    ALTER COLUMN completed TYPE retsu_counter,
    ALTER COLUMN groups TYPE retsu_counter;
ALTER TABLE queue_message
    DROP CONSTRAINT queue_message_queue_id_fkey,
    DROP CONSTRAINT queue_message_priority_range,
    DROP CONSTRAINT queue_message_state_known,
    DROP CONSTRAINT queue_message_attempts_non_negative,
    DROP CONSTRAINT queue_message_group_length,
    DROP CONSTRAINT queue_message_expiry_after_enqueue,
    DROP CONSTRAINT queue_message_in_flight_has_handle,
    ALTER COLUMN priority TYPE retsu_priority_level,
    ALTER COLUMN state TYPE retsu_state_code,
    ALTER COLUMN delivery_attempts TYPE retsu_attempt_count,
    ALTER COLUMN group_key TYPE retsu_group_key;
ALTER DOMAIN retsu_counter
    ADD CONSTRAINT retsu_counter_never_negative CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN retsu_shard_number
    ADD CONSTRAINT retsu_shard_number_range CHECK (VALUE BETWEEN 0 AND 31) NOT VALID;
ALTER DOMAIN retsu_priority_level
    ADD CONSTRAINT retsu_priority_level_range CHECK (VALUE BETWEEN 1 AND 3) NOT VALID;
ALTER DOMAIN retsu_state_code
    ADD CONSTRAINT retsu_state_code_known CHECK (VALUE BETWEEN 1 AND 7) NOT VALID;
ALTER DOMAIN retsu_attempt_count
    ADD CONSTRAINT retsu_attempt_count_never_negative CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN retsu_group_key
    ADD CONSTRAINT retsu_group_key_length CHECK (length(VALUE) BETWEEN 1 AND 128) NOT VALID
"""

# retsu_enqueue as migration 0010 left it: the queue's row first, then a branch for batches
# without groups. The new first step takes those batches in one statement; the old branch
# goes (the grouped code below it handles a batch holding any group, as before).
_LOOKUP = """\
BEGIN
    SELECT q.default_message_ttl_seconds,
"""
_LEAN = """\
BEGIN
    IF p_groups IS NULL OR cardinality(array_remove(p_groups, NULL)) = 0 THEN
        -- No lanes: one statement (migration 0017). The queue's row first, locked as a
        -- deletion would need it, with the first delay not shorter than its lifetime; the
        -- messages only when there is none; then their counts.
        WITH q AS (
            SELECT q.default_message_ttl_seconds AS ttl,
                   (SELECT m.o FROM unnest(p_ttls, p_delays) WITH ORDINALITY AS m(ttl, delay, o)
                    WHERE m.delay >= coalesce(m.ttl, q.default_message_ttl_seconds)
                    ORDER BY m.o LIMIT 1) AS bad
            FROM queue AS q WHERE q.id = p_queue_id
            FOR KEY SHARE
        ), stored AS (
            INSERT INTO queue_message
                (id, queue_id, payload, priority, state, enqueued_at, expires_at,
                 available_after, delivery_attempts, redriven_from, schedule_id)
            SELECT m.id, p_queue_id, m.payload, m.priority,
                   CASE WHEN m.delay > 0 THEN 3 ELSE 1 END, now(),
                   now() + make_interval(secs => coalesce(m.ttl, q.ttl)),
                   now() + make_interval(secs => m.delay), 0, p_redriven_from[m.o],
                   p_schedule_ids[m.o]
            FROM q, unnest(p_ids, p_payloads, p_priorities, p_ttls, p_delays)
                 WITH ORDINALITY AS m(id, payload, priority, ttl, delay, o)
            WHERE q.bad IS NULL
            ORDER BY m.o
            RETURNING id, priority, state
        ), counted AS (
            INSERT INTO queue_state_rollup AS c
                (queue_id, priority, shard, ready, delayed, enqueued)
            SELECT p_queue_id, s.priority, retsu_shard(s.id),
                   count(*) FILTER (WHERE s.state = 1),
                   count(*) FILTER (WHERE s.state = 3), count(*)
            FROM stored AS s
            GROUP BY 2, 3
            ORDER BY 2, 3
            ON CONFLICT (queue_id, priority, shard) DO UPDATE
            SET ready = c.ready + excluded.ready, delayed = c.delayed + excluded.delayed,
                enqueued = c.enqueued + excluded.enqueued
        )
        SELECT count(*) > 0, max(q.bad) INTO queue_found, invalid_delay_at FROM q;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT q.default_message_ttl_seconds,
"""
_UNGROUPED_FROM = """\
    IF p_groups IS NULL OR NOT EXISTS (SELECT 1 FROM unnest(p_groups) AS g WHERE g IS NOT NULL)
    THEN
        -- No lanes: one statement, as before.
        WITH stored AS (
            INSERT INTO queue_message
                (id, queue_id, payload, priority, state, enqueued_at, expires_at,
                 available_after, delivery_attempts, redriven_from, schedule_id)
            SELECT m.id, p_queue_id, m.payload, m.priority,
                   CASE WHEN m.delay > 0 THEN 3 ELSE 1 END, now(),
                   now() + make_interval(secs => coalesce(m.ttl, v_default_ttl)),
                   now() + make_interval(secs => m.delay), 0, p_redriven_from[m.o],
                   p_schedule_ids[m.o]
            FROM unnest(p_ids, p_payloads, p_priorities, p_ttls, p_delays)
                 WITH ORDINALITY AS m(id, payload, priority, ttl, delay, o)
            ORDER BY m.o
            RETURNING id, priority, state
        )
        INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, delayed, enqueued)
        SELECT p_queue_id, s.priority, retsu_shard(s.id),
               count(*) FILTER (WHERE s.state = 1),
               count(*) FILTER (WHERE s.state = 3), count(*)
        FROM stored AS s
        GROUP BY 2, 3
        ORDER BY 2, 3
        ON CONFLICT (queue_id, priority, shard) DO UPDATE
        SET ready = c.ready + excluded.ready, delayed = c.delayed + excluded.delayed,
            enqueued = c.enqueued + excluded.enqueued;
        RETURN QUERY SELECT true, NULL::integer;
        RETURN;
    END IF;
"""
_ENQUEUE = (
    "retsu_enqueue(uuid, uuid[], text[], smallint[], integer[], integer[], text[], uuid[], uuid[])"
)
EDITS: list[tuple[str, list[tuple[str, str]]]] = [
    (_ENQUEUE, [(_LOOKUP, _LEAN), (_UNGROUPED_FROM, "")]),
]


def upgrade() -> None:
    for statement in _DOMAINS.split(";\n"):
        if statement.strip():
            op.execute(statement)
    bind = op.get_bind()
    for function, edits in EDITS:
        definition = bind.execute(
            sa.text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"), {"f": function}
        ).scalar_one()
        for number, (old, new) in enumerate(edits, 1):
            found = definition.count(old)
            if found != 1:
                raise RuntimeError(
                    f"{function} holds {found} copies of migration 0017's fragment {number}, "
                    "not 1: edited by hand?"
                )
            definition = definition.replace(old, new)
        # exec_driver_sql: the text goes to PostgreSQL as it is (no bind parameters).
        bind.exec_driver_sql(definition)
    # A column's type change drops its statistics (pg_statistic); without them the planner
    # guesses for state, priority and group_key until autovacuum's next analyze.
    op.execute("ANALYZE queue_message, queue_state_rollup")


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
