"""Grouped messages on the one-statement path: the claim and the acknowledgement of a queue
whose lanes hold one lease each (``group_max_in_flight`` 1, the default) and that has no
``max_in_flight``, ``rate_limit`` or ``group_rate_limit`` (SPEC §3.10, §7b "groups").

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

**Why.** Migration 0009 sends every claim of a queue with a live lane to the general path
(``retsu_claim_flow``: five to eight statements, jsonb bookkeeping, ``retsu_group_apply``'s
loop) and every acknowledgement there to its general path (a DELETE loop, then
``retsu_group_apply``, then the counters): a grouped message cost the database 2.4–2.9× an
ungrouped one (docs/performance.md, "New features' costs (issue 24)"), against SPEC §7b's
"groups (10,000 × 10) ≥ 0.8 × ungrouped".

**The claim** (``retsu_claim_lanes``, which ``retsu_dequeue`` now calls for such a queue
instead of ``retsu_claim_flow``): one statement does what the general path does when each
lane holds at most one lease — the four candidate scans (ungrouped READY by enqueue order,
group heads by wait key, ended leases, ended delays and parked heads; message rows locked
with SKIP LOCKED), the candidates' group rows locked in key order, the choice in delivery
order (a head whose group already holds a lease — left by a lowered ``group_max_in_flight``
— goes back to waiting, as the general path's ``v_demote``), the claims (a grouped one gets
its new wait key from the enqueue sequence), the losers' step 8 (ended delays and parked
heads READY in their place, ungrouped ended leases READY, a grouped ended lease stays
leased in its lane), the group rows (``leased``, ``pending``, ``waiting``,
``last_delivery_key``, ``last_delivered_at``, ``head_key`` exactly as ``retsu_group_apply``
sets them; with one lease per lane nothing is promoted after a claim and no group's live
count changes) and the counters, last. Whenever the queue has work of the general path's
first two steps — an exhausted lease, a READY message with no attempt left, a waiting
message whose own delay ended — the statement does nothing (three index probes decide it
before any row is locked) and the claim is ``retsu_claim_flow``'s, unchanged.

**The acknowledgement** (``retsu_acknowledge``'s general path, edited): one statement deletes
the messages (``RETURNING group_key``), locks their groups in key order, takes each lane's
next message exactly as ``retsu_group_apply`` does (the oldest WAITING or WAITING_DELAYED
member by enqueue order, through ``queue_message_group_idx``, locked; READY with wait key
``greatest(enqueue_order, last_delivery_key)``, DELAYED while its own delay runs, READY
with the ready/delayed counter move when it ended), updates the group rows and the rollup
(``in_flight``, ``acknowledged``, the promotions' moves, ``groups`` when a lane empties).
An ungrouped acknowledgement on a queue with lanes takes it too. It applies its changes
only when its snapshot saw every acknowledged message's group row as the lock found it
(same ``ctid``: no writer changed the lane between the statement's start and the lock —
a concurrent enqueue's new member would be invisible to the statement's snapshot); when
one changed, or the queue's lanes are wider or rate-limited, it changes nothing but the
DELETE and hands the deleted rows to 0009's code after it (``retsu_group_apply``, then the
counters), which reads them afresh.

**Lock order**, as everywhere: message rows, then group rows in key order (then a lane's
next member, as ``retsu_group_apply``), then counter rows in one UPDATE, after the group
rows are written (the counter update reads the group update's rows).

**The functions are edited, not restated** (as migration 0013 does): ``retsu_dequeue`` and
``retsu_acknowledge`` are read back from the catalogue (``pg_get_functiondef``) and one
exact fragment of each replaced; the migration fails if a fragment is not found exactly
once. Everything else in them (migration 0014's edits among it) is kept.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

READY, IN_FLIGHT, DELAYED, WAITING, WAITING_DELAYED, COMPLETED, THROTTLED = 1, 2, 3, 4, 5, 6, 7
COUNTED_READY = f"({READY}, {WAITING}, {THROTTLED})"
TIMED = f"({DELAYED}, {THROTTLED})"
PINNED = (
    "SET enable_seqscan = off SET enable_bitmapscan = off "
    "SET plan_cache_mode = force_generic_plan SET jit = off"
)
SEQUENCE = "queue_message_enqueue_order_seq"
# The rollup row that counts a group in ``groups`` (migration 0009's retsu_group_apply).
GROUP_SHARD = "(get_byte(decode(md5({key}), 'hex'), 0) & 31)::smallint"

_CLAIM_COLUMNS = """
    id uuid, payload text, priority smallint, group_key text, receipt_handle uuid,
    delivery_attempts integer, enqueued_at timestamptz, enqueue_order bigint,
    queue_found boolean, paused boolean, dead_lettered bigint,
    next_available_in double precision, throttled text"""

# Migration 0009's final row and "when nothing was claimed" (its _FINAL, _NEXT_AVAILABLE).
_FINAL = """
    id := NULL; payload := NULL; priority := NULL; group_key := NULL; receipt_handle := NULL;
    delivery_attempts := NULL; enqueued_at := NULL; enqueue_order := NULL;
    queue_found := true; paused := false; dead_lettered := 0;
    next_available_in := NULL; throttled := NULL;"""

_NEXT_AVAILABLE = f"""
    IF v_claimed = 0 THEN
        SELECT extract(epoch FROM min(u.at) - now())::double precision INTO next_available_in
        FROM (
            (SELECT m.available_after AS at FROM queue_message AS m
             WHERE m.queue_id = p_queue_id AND m.state IN {TIMED}
               AND m.available_after > now()
             ORDER BY m.available_after LIMIT 1)
            UNION ALL
            (SELECT m.available_after FROM queue_message AS m
             WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
               AND m.available_after > now()
             ORDER BY m.available_after LIMIT 1)
        ) AS u;
    END IF;"""

# The claim of a queue with lanes of one lease each, no cap and no bucket. ``p_max``: the
# queue's max_delivery_attempts (read by retsu_dequeue). Rows as retsu_dequeue's.
CLAIM_LANES = f"""
CREATE FUNCTION retsu_claim_lanes(
    p_queue_id uuid, p_limit integer, p_visibility integer, p_batch integer,
    p_reason text, p_consumer text, p_max integer)
RETURNS TABLE ({_CLAIM_COLUMNS})
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_claimed integer := 0;
    v_general boolean := false;
    r record;
BEGIN
    FOR r IN
        WITH general AS MATERIALIZED (
            -- The general path's steps 1 and 2 have work: leave the claim to it.
            SELECT EXISTS (
                       SELECT 1 FROM queue_message AS m
                       WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
                         AND m.available_after <= now() AND m.expires_at > now()
                         AND m.delivery_attempts >= p_max)
                   OR EXISTS (
                       SELECT 1 FROM queue_message AS m
                       WHERE m.queue_id = p_queue_id AND m.state = {READY}
                         AND m.delivery_attempts > 0 AND m.delivery_attempts >= p_max
                         AND m.expires_at > now())
                   OR EXISTS (
                       SELECT 1 FROM queue_message AS m
                       WHERE m.queue_id = p_queue_id AND m.state = {WAITING_DELAYED}
                         AND m.available_after <= now()) AS found
        ), ready_plain AS (
            SELECT m.id, m.priority, m.enqueue_order AS k, m.enqueue_order AS o, m.state,
                   m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.group_key IS NULL
              AND m.expires_at > now() AND m.delivery_attempts < p_max
              AND NOT (SELECT g.found FROM general AS g)
            ORDER BY m.priority DESC, m.enqueue_order LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ), ready_grouped AS (
            SELECT m.id, m.priority, m.wait_key AS k, m.enqueue_order AS o, m.state,
                   m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.group_key IS NOT NULL
              AND m.expires_at > now() AND m.delivery_attempts < p_max
              AND NOT (SELECT g.found FROM general AS g)
            ORDER BY m.priority DESC, m.wait_key LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ), due_leases AS (
            SELECT m.id, m.priority, coalesce(m.wait_key, m.enqueue_order) AS k,
                   m.enqueue_order AS o, m.state, m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts < p_max
              AND NOT (SELECT g.found FROM general AS g)
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), due_timed AS (
            SELECT m.id, m.priority, coalesce(m.wait_key, m.enqueue_order) AS k,
                   m.enqueue_order AS o, m.state, m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state IN {TIMED}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts < p_max
              AND NOT (SELECT g.found FROM general AS g)
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), candidate AS (
            SELECT * FROM ready_plain
            UNION ALL SELECT * FROM ready_grouped
            UNION ALL SELECT * FROM due_leases
            UNION ALL SELECT * FROM due_timed
        ), lanes AS (
            -- The candidates' group rows, locked in key order (after the message rows).
            SELECT g.group_key, g.leased FROM queue_group AS g
            WHERE g.queue_id = p_queue_id
              AND g.group_key = ANY (ARRAY(SELECT c.group_key FROM candidate AS c
                                           WHERE c.group_key IS NOT NULL))
            ORDER BY g.group_key
            FOR UPDATE OF g
        ), ranked AS (
            -- A new delivery of a group that already holds its one lease may not be made.
            SELECT c.id, c.priority, c.k, c.o, c.state, c.group_key,
                   c.state = {IN_FLIGHT} OR c.group_key IS NULL
                       OR coalesce(l.leased, 0) < 1 AS allowed
            FROM candidate AS c LEFT JOIN lanes AS l ON l.group_key = c.group_key
        ), walked AS (
            -- Walked in delivery order until p_limit are chosen: the allowed ones before
            -- that point are claimed, the others before it go back to waiting.
            SELECT w.*, coalesce(count(*) FILTER (WHERE w.allowed) OVER (
                       ORDER BY w.priority DESC, w.k, w.o
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) < p_limit AS reached
            FROM ranked AS w
        ), claimed AS (
            UPDATE queue_message AS m
            SET state = {IN_FLIGHT}, delivery_attempts = m.delivery_attempts + 1,
                receipt_handle = gen_random_uuid(),
                available_after = now() + make_interval(secs => p_visibility),
                last_delivered_at = now(),
                attempts = retsu_new_attempt(
                    m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer),
                wait_key = CASE WHEN m.group_key IS NULL THEN m.wait_key
                                ELSE nextval('{SEQUENCE}') END
            FROM walked AS w
            WHERE m.id = w.id AND w.reached AND w.allowed
            RETURNING m.id, m.payload, m.priority, m.group_key, m.receipt_handle,
                      m.delivery_attempts, m.enqueued_at, m.enqueue_order, m.wait_key,
                      w.state AS was, w.k
        ), moved AS (
            -- One UPDATE (one set of index openings) for the rest: candidates past the
            -- limit, ended delays and parked heads, become READY in their place, ungrouped
            -- ended leases too (a grouped ended lease stays leased); heads of lanes that
            -- hold their lease already go back to WAITING (``demoted``).
            UPDATE queue_message AS m
            SET state = CASE WHEN w.reached THEN {WAITING} ELSE {READY} END
            FROM walked AS w
            WHERE m.id = w.id
              AND ((NOT w.reached AND w.state <> {READY}
                    AND (w.state <> {IN_FLIGHT} OR w.group_key IS NULL))
                   OR (w.reached AND NOT w.allowed))
            RETURNING m.id, m.priority, m.group_key, w.state AS was, w.reached AS demoted
        ), lane_changes AS (
            SELECT x.group_key, sum((x.was <> {IN_FLIGHT})::int) AS leased,
                   -sum((x.was IN ({READY}, {DELAYED}, {THROTTLED}))::int) AS pending,
                   0 AS waiting, max(x.wait_key) AS key
            FROM claimed AS x WHERE x.group_key IS NOT NULL GROUP BY 1
            UNION ALL
            SELECT x.group_key, 0, -1, 1, NULL::bigint FROM moved AS x WHERE x.demoted
        ), laned AS (
            UPDATE queue_group AS g
            SET leased = g.leased + d.leased, pending = g.pending + d.pending,
                waiting = g.waiting + d.waiting,
                last_delivery_key = greatest(g.last_delivery_key, coalesce(d.key, 0)),
                last_delivered_at = CASE WHEN d.key IS NULL THEN g.last_delivered_at
                                         ELSE now() END,
                head_key = CASE WHEN d.key IS NULL THEN g.head_key
                                ELSE greatest(g.head_key, d.key) END
            FROM (SELECT c.group_key, sum(c.leased)::integer AS leased,
                         sum(c.pending)::integer AS pending, sum(c.waiting)::integer AS waiting,
                         max(c.key) AS key
                  FROM lane_changes AS c GROUP BY 1 ORDER BY 1) AS d
            -- (= ANY: through the key's index entries; a join walked the queue's groups)
            WHERE g.queue_id = p_queue_id AND g.group_key = d.group_key
              AND g.group_key = ANY (ARRAY(SELECT c.group_key FROM lane_changes AS c))
            RETURNING 1
        ), deltas AS (
            SELECT x.priority, retsu_shard(x.id) AS shard,
                   -(x.was IN {COUNTED_READY})::int AS ready,
                   (x.was <> {IN_FLIGHT})::int AS in_flight, -(x.was = {DELAYED})::int AS delayed,
                   1 AS delivered
            FROM claimed AS x
            UNION ALL
            SELECT x.priority, retsu_shard(x.id), (x.was NOT IN {COUNTED_READY})::int,
                   -(x.was = {IN_FLIGHT})::int, -(x.was = {DELAYED})::int, 0
            FROM moved AS x WHERE NOT x.demoted
            UNION ALL
            SELECT x.priority, retsu_shard(x.id), (x.was = {DELAYED})::int, 0,
                   -(x.was = {DELAYED})::int, 0
            FROM moved AS x WHERE x.demoted
        ), counted AS (
            -- Last, once the group rows are written (it reads their update's rows).
            UPDATE queue_state_rollup AS c
            SET ready = c.ready + d.ready, in_flight = c.in_flight + d.in_flight,
                delayed = c.delayed + d.delayed, delivered = c.delivered + d.delivered
            FROM (SELECT x.priority, x.shard, sum(x.ready) AS ready,
                         sum(x.in_flight) AS in_flight, sum(x.delayed) AS delayed,
                         sum(x.delivered) AS delivered
                  FROM deltas AS x
                  WHERE (SELECT count(*) FROM laned) >= 0
                  GROUP BY 1, 2 ORDER BY 1, 2) AS d
            WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard
            RETURNING 1
        )
        SELECT x.id, x.payload, x.priority, x.group_key, x.receipt_handle,
               x.delivery_attempts, x.enqueued_at, x.enqueue_order,
               (SELECT g.found FROM general AS g) AS general
        FROM (SELECT 1) AS one LEFT JOIN claimed AS x ON true
        -- Rows in delivery order.
        ORDER BY x.priority DESC, x.k, x.enqueue_order
    LOOP
        v_general := r.general;  -- the same on every row
        IF r.id IS NOT NULL THEN
            v_claimed := v_claimed + 1;
            id := r.id; payload := r.payload; priority := r.priority; group_key := r.group_key;
            receipt_handle := r.receipt_handle; delivery_attempts := r.delivery_attempts;
            enqueued_at := r.enqueued_at; enqueue_order := r.enqueue_order;
            queue_found := true; paused := false; dead_lettered := NULL;
            next_available_in := NULL; throttled := NULL;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF v_general THEN
        RETURN QUERY SELECT * FROM retsu_claim_flow(
            p_queue_id, p_limit, p_visibility, p_batch, p_reason, p_consumer);
        RETURN;
    END IF;{_FINAL}{_NEXT_AVAILABLE}
    RETURN NEXT;
END
$$;
"""

# -- the edits -------------------------------------------------------------------------------

# retsu_dequeue: a queue with live lanes, one lease per lane, no cap and no bucket claims
# through retsu_claim_lanes.
DEQUEUE_FROM = """
    THEN
        RETURN QUERY SELECT * FROM retsu_claim_flow(
            p_queue_id, p_limit, v_visibility, p_batch, p_reason, p_consumer);"""
DEQUEUE_TO = """
    THEN
        -- Migration 0015: lanes of one lease each, no cap, no bucket: one statement.
        IF v_cap IS NULL AND v_rate IS NULL AND v_n = 1 AND v_group_rate IS NULL THEN
            RETURN QUERY SELECT * FROM retsu_claim_lanes(
                p_queue_id, p_limit, v_visibility, p_batch, p_reason, p_consumer, v_max);
            RETURN;
        END IF;
        RETURN QUERY SELECT * FROM retsu_claim_flow(
            p_queue_id, p_limit, v_visibility, p_batch, p_reason, p_consumer);"""

# retsu_acknowledge: migration 0009's DELETE loop of the general path (nothing kept)...
ACKNOWLEDGE_FROM = f"""
    IF v_retention = 0 THEN
        FOR r IN
            DELETE FROM queue_message AS m
            WHERE m.id = ANY (p_ids) AND m.queue_id = p_queue_id AND m.state + 0 = {IN_FLIGHT}
              AND m.receipt_handle = p_handles[array_position(p_ids, m.id)]
              AND m.available_after > now()
            RETURNING m.id, m.priority, m.group_key
        LOOP
            v_removed := v_removed + 1;
            d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
            IF r.group_key IS NOT NULL THEN
                l_groups := l_groups || r.group_key;
            END IF;
        END LOOP;
    ELSE"""
# ... becomes one statement that does the lanes' and the counters' work too when it may
# (``applied``); otherwise it hands the deleted rows to the code after it, as the loop did.
ACKNOWLEDGE_TO = f"""
    IF v_retention = 0 THEN
        -- Migration 0015: the deletion, the lanes and the counters in one statement.
        WITH removed_rows AS (
            DELETE FROM queue_message AS m
            WHERE m.id = ANY (p_ids) AND m.queue_id = p_queue_id AND m.state + 0 = {IN_FLIGHT}
              AND m.receipt_handle = p_handles[array_position(p_ids, m.id)]
              AND m.available_after > now()
            RETURNING m.id, m.priority, m.group_key
        ), acked AS (
            SELECT x.group_key, count(*)::integer AS n FROM removed_rows AS x
            WHERE x.group_key IS NOT NULL GROUP BY 1
        ), simple AS (
            SELECT q.group_max_in_flight = 1 AND q.group_rate_per_second IS NULL AS yes
            FROM queue AS q WHERE q.id = p_queue_id
        ), seen AS (
            -- The group rows as this statement's snapshot has them.
            SELECT g.group_key, g.ctid AS tid FROM queue_group AS g
            WHERE g.queue_id = p_queue_id
              AND g.group_key = ANY (ARRAY(SELECT a.group_key FROM acked AS a))
        ), lanes AS (
            -- Locked in key order: the latest versions.
            SELECT g.group_key, g.ctid AS tid, g.leased, g.pending, g.waiting,
                   g.waiting_delayed, g.last_delivery_key
            FROM queue_group AS g
            WHERE g.queue_id = p_queue_id
              AND g.group_key = ANY (ARRAY(SELECT a.group_key FROM acked AS a))
              AND (SELECT s.yes FROM simple AS s)
            ORDER BY g.group_key
            FOR UPDATE OF g
        ), due AS (
            -- The lanes that get their next message (retsu_group_apply's test, n = 1).
            SELECT l.group_key, l.last_delivery_key FROM lanes AS l
            JOIN acked AS a ON a.group_key = l.group_key
            WHERE l.pending = 0 AND l.waiting + l.waiting_delayed > 0 AND l.leased - a.n < 1
        ), nexts AS (
            SELECT d.group_key, w.id, w.state, w.available_after, w.priority,
                   greatest(w.enqueue_order, d.last_delivery_key) AS key
            FROM due AS d CROSS JOIN LATERAL (
                SELECT m.id, m.state, m.available_after, m.enqueue_order, m.priority
                FROM queue_message AS m
                WHERE m.queue_id = p_queue_id AND m.group_key = d.group_key
                  AND m.state IN ({WAITING}, {WAITING_DELAYED})
                ORDER BY m.enqueue_order
                LIMIT 1
                FOR UPDATE
            ) AS w
        ), applied AS MATERIALIZED (
            -- Nothing grouped, or every lane as the snapshot saw it and its next member found.
            SELECT NOT EXISTS (SELECT 1 FROM acked)
                   OR ((SELECT s.yes FROM simple AS s)
                       AND NOT EXISTS (
                           SELECT 1 FROM acked AS a
                           LEFT JOIN seen AS s ON s.group_key = a.group_key
                           LEFT JOIN lanes AS l ON l.group_key = a.group_key
                           WHERE s.tid IS NULL OR l.tid IS NULL OR s.tid <> l.tid)
                       AND NOT EXISTS (
                           SELECT 1 FROM due AS d
                           WHERE d.group_key NOT IN (SELECT x.group_key FROM nexts AS x)))
                   AS yes
        ), promoted AS (
            UPDATE queue_message AS m
            SET state = CASE WHEN x.state = {WAITING_DELAYED} AND x.available_after > now()
                             THEN {DELAYED} ELSE {READY} END,
                wait_key = x.key
            FROM nexts AS x
            WHERE m.id = x.id AND (SELECT a.yes FROM applied AS a)
            RETURNING m.id, m.priority, m.group_key, m.state AS became, x.state AS was, x.key
        ), laned AS (
            UPDATE queue_group AS g
            SET leased = g.leased - a.n,
                pending = g.pending + (p.id IS NOT NULL)::int,
                waiting = g.waiting - coalesce((p.was = {WAITING})::int, 0),
                waiting_delayed = g.waiting_delayed - coalesce((p.was = {WAITING_DELAYED})::int, 0),
                head_key = coalesce(p.key, g.head_key)
            FROM acked AS a LEFT JOIN promoted AS p ON p.group_key = a.group_key
            WHERE g.queue_id = p_queue_id AND g.group_key = a.group_key
              AND g.group_key = ANY (ARRAY(SELECT x.group_key FROM acked AS x))
              AND (SELECT y.yes FROM applied AS y)
            RETURNING g.group_key, g.leased + g.pending + g.waiting + g.waiting_delayed AS live
        ), deltas AS (
            SELECT x.priority, retsu_shard(x.id) AS shard, 1 AS acknowledged, 0 AS ready,
                   0 AS delayed, 0 AS groups
            FROM removed_rows AS x WHERE (SELECT y.yes FROM applied AS y)
            UNION ALL
            SELECT x.priority, retsu_shard(x.id), 0, 1, -1, 0
            FROM promoted AS x WHERE x.was = {WAITING_DELAYED} AND x.became = {READY}
            UNION ALL
            SELECT 2::smallint, {GROUP_SHARD.format(key="x.group_key")}, 0, 0, 0, -1
            FROM laned AS x WHERE x.live = 0
        ), counted AS (
            -- Last, once the group rows are written (it reads their update's rows).
            UPDATE queue_state_rollup AS c
            SET in_flight = c.in_flight - d.acknowledged,
                acknowledged = c.acknowledged + d.acknowledged,
                ready = c.ready + d.ready, delayed = c.delayed + d.delayed,
                groups = c.groups + d.groups
            FROM (SELECT x.priority, x.shard, sum(x.acknowledged) AS acknowledged,
                         sum(x.ready) AS ready, sum(x.delayed) AS delayed,
                         sum(x.groups) AS groups
                  FROM deltas AS x
                  GROUP BY 1, 2 ORDER BY 1, 2) AS d
            WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard
            RETURNING 1
        )
        SELECT (SELECT a.yes FROM applied AS a) AS applied,
               (SELECT count(*) FROM removed_rows) AS removed_count,
               (SELECT count(*) FROM promoted) AS promoted_count,
               (SELECT coalesce(array_agg(x.group_key) FILTER (WHERE x.group_key IS NOT NULL),
                                '{{}}')
                FROM removed_rows AS x) AS lane_keys,
               (SELECT coalesce(array_agg(x.priority), '{{}}') FROM removed_rows AS x)
                   AS priorities,
               (SELECT coalesce(array_agg(retsu_shard(x.id)), '{{}}') FROM removed_rows AS x)
                   AS shards
        INTO r;
        v_removed := r.removed_count;
        v_promoted := r.promoted_count;
        IF NOT r.applied THEN
            -- Left to migration 0009's code below: the lanes, then the counters.
            l_groups := r.lane_keys;
            d_priorities := r.priorities;
            d_shards := r.shards;
        END IF;
    ELSE"""

EDITS = {
    "retsu_dequeue(uuid, integer, integer, integer, text, text)": (DEQUEUE_FROM, DEQUEUE_TO),
    "retsu_acknowledge(uuid, uuid[], uuid[], text[])": (ACKNOWLEDGE_FROM, ACKNOWLEDGE_TO),
}


def upgrade() -> None:
    bind = op.get_bind()
    op.execute(CLAIM_LANES)
    # Retsu's own role only (as 0013 and 0014 do: a schema's default privileges cannot take
    # back PostgreSQL's global EXECUTE for PUBLIC).
    op.execute(
        "REVOKE ALL ON FUNCTION "
        "retsu_claim_lanes(uuid, integer, integer, integer, text, text, integer) FROM PUBLIC"
    )
    for function, (old, new) in EDITS.items():
        definition = bind.execute(
            sa.text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"), {"f": function}
        ).scalar_one()
        found = definition.count(old)
        if found != 1:
            raise RuntimeError(
                f"{function} holds {found} copies of the fragment migration 0015 replaces, "
                "not 1: edited by hand?"
            )
        # exec_driver_sql: the text goes to PostgreSQL as it is (no bind parameters).
        bind.exec_driver_sql(definition.replace(old, new))


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
