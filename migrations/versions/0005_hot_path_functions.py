"""The hot path as server-side functions, a DELAYED state, counters kept by the statements,
operator tables (consumers, history).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

What changes, and why (measured on these machines; docs/performance.md has the table):

* **Enqueue, dequeue, acknowledge and visibility are PL/pgSQL functions.** Their plans
  are cached by the server session, whatever the client does: through PgBouncer in
  transaction mode (no client-side prepared statement may outlive a transaction) a
  plain statement is parsed and planned on every call — the dequeue's planning alone
  cost 0.7-1.5 ms, more than running it. Each function pins its own planner settings
  (``SET`` clauses apply for the call only, so no session setting is needed, which
  PgBouncer would refuse as a startup parameter): no sequential or bitmap scans, so the
  claim walks its index in order and stops at the first unlocked row whatever the
  statistics say, and generic plans (a ``LIMIT $n`` made PostgreSQL re-plan the claim on
  every call).
* **A third physical state, DELAYED (3)**, for messages inside their first delay. They
  leave the claim index (30,000 delayed messages at the head of a queue no longer cost a
  claim 1,173 buffers); a claim finds the delays that have ended through their own index,
  by the time they end, like the leases that have ended.
* **Indexes by what reads them**, each partial where it can be: delivery order of READY
  rows (claims), lease end of IN_FLIGHT rows (retries, dead-lettering, browsing), delay
  end of DELAYED rows, enqueue order (browsing every live message), expiry of rows not in
  flight (the cleaner). A claim changes only the primary key, the enqueue-order index and
  the lease index.
* **Counters kept by the statements themselves**, in the same statement as the change
  (the rollup's triggers with transition tables are gone: they copied every changed row,
  payload included, and ran even when a statement changed nothing). Every writer of
  ``queue_message`` and ``queue_dead_letter_message`` lives in the PostgreSQL adapter or in
  these functions and updates ``queue_state_rollup`` itself; the integration tests compare
  the counters with ``count(*)`` after every kind of change. The rollup also keeps
  cumulative counts of what happened (enqueued, delivered, acknowledged, dead-lettered,
  expired) for the queue history (SPEC §3.8): exact, because counted in the transaction
  that made the change.
* ``queue_message.redriven_from``: the dead letter a redriven message came from.
* ``queue_consumer`` (SPEC §3.7) and ``queue_history`` (SPEC §3.8).
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

READY, IN_FLIGHT, DELAYED = 1, 2, 3

# Every hot function: plans that do not depend on statistics, cached by the session.
PINNED = (
    "SET enable_seqscan = off SET enable_bitmapscan = off "
    "SET plan_cache_mode = force_generic_plan SET jit = off"
)

SCHEMA = f"""
-- No writer may slip between the triggers going and the counters being corrected.
LOCK TABLE queue_message, queue_dead_letter_message IN SHARE ROW EXCLUSIVE MODE;

DROP TRIGGER queue_message_rollup_insert ON queue_message;
DROP TRIGGER queue_message_rollup_update ON queue_message;
DROP TRIGGER queue_message_rollup_delete ON queue_message;
DROP TRIGGER queue_dead_letter_rollup_insert ON queue_dead_letter_message;
DROP TRIGGER queue_dead_letter_rollup_delete ON queue_dead_letter_message;
DROP FUNCTION queue_message_rollup();
DROP FUNCTION queue_dead_letter_rollup();

ALTER TABLE queue_message
    DROP CONSTRAINT queue_message_state_known,
    ADD CONSTRAINT queue_message_state_known CHECK (state IN (1, 2, 3)),
    DROP CONSTRAINT queue_message_in_flight_has_handle,
    ADD CONSTRAINT queue_message_in_flight_has_handle
        CHECK (state <> {IN_FLIGHT} OR receipt_handle IS NOT NULL),
    ADD COLUMN redriven_from uuid;

ALTER TABLE queue_state_rollup
    ADD COLUMN delayed bigint NOT NULL DEFAULT 0,
    ADD COLUMN enqueued bigint NOT NULL DEFAULT 0,
    ADD COLUMN delivered bigint NOT NULL DEFAULT 0,
    ADD COLUMN acknowledged bigint NOT NULL DEFAULT 0,
    ADD COLUMN dead_lettered bigint NOT NULL DEFAULT 0,
    ADD COLUMN expired bigint NOT NULL DEFAULT 0,
    DROP CONSTRAINT queue_state_rollup_never_negative,
    ADD CONSTRAINT queue_state_rollup_never_negative
        CHECK (ready >= 0 AND in_flight >= 0 AND delayed >= 0 AND dead_letters >= 0);

-- Messages still inside their first delay become physically DELAYED.
WITH moved AS (
    UPDATE queue_message SET state = {DELAYED}
    WHERE state = {READY} AND delivery_attempts = 0 AND available_after > now()
    RETURNING queue_id, priority, retsu_shard(id) AS shard
)
UPDATE queue_state_rollup AS r SET ready = r.ready - d.n, delayed = r.delayed + d.n
FROM (SELECT queue_id, priority, shard, count(*) AS n FROM moved GROUP BY 1, 2, 3) AS d
WHERE r.queue_id = d.queue_id AND r.priority = d.priority AND r.shard = d.shard;

DROP INDEX queue_message_order_idx, queue_message_lease_idx, queue_message_delayed_idx,
    queue_message_expiry_idx;
-- Browsing every live message of a queue in enqueue order.
CREATE INDEX queue_message_browse_idx ON queue_message (queue_id, enqueue_order);
-- Claims: the READY rows of a queue in delivery order (highest priority, then FIFO).
CREATE INDEX queue_message_ready_idx ON queue_message (queue_id, priority DESC, enqueue_order)
    WHERE state = {READY};
-- Leases by their end: ended ones (retries, dead-lettering), active ones (browsing).
CREATE INDEX queue_message_lease_idx ON queue_message (queue_id, available_after, enqueue_order)
    WHERE state = {IN_FLIGHT};
-- Delays by their end.
CREATE INDEX queue_message_delay_idx ON queue_message (queue_id, available_after, enqueue_order)
    WHERE state = {DELAYED};
-- READY messages delivered before (retries): few, and where a lowered attempts limit can
-- leave some with no attempts left (claims move those to dead letters).
CREATE INDEX queue_message_retry_idx ON queue_message (queue_id, delivery_attempts)
    WHERE state = {READY} AND delivery_attempts > 0;
-- The expired-message cleaner; rows in flight are found through their lease instead, so a
-- claim adds no entry here.
CREATE INDEX queue_message_expiry_idx ON queue_message (expires_at) WHERE state <> {IN_FLIGHT};

-- SPEC §3.7: what each API process saw of each named consumer, coalesced.
CREATE TABLE queue_consumer (
    queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
    name text NOT NULL CONSTRAINT queue_consumer_name_length CHECK (length(name) BETWEEN 1 AND 128),
    first_seen_at timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    deliveries bigint NOT NULL DEFAULT 0 CONSTRAINT queue_consumer_deliveries_non_negative
        CHECK (deliveries >= 0),
    PRIMARY KEY (queue_id, name)
);
CREATE INDEX queue_consumer_seen_idx ON queue_consumer (last_seen_at DESC, queue_id, name);
CREATE INDEX queue_consumer_queue_seen_idx
    ON queue_consumer (queue_id, last_seen_at DESC, name);

-- SPEC §3.8: one row per queue per collection of the state-metrics collector's leader.
-- The interval counts are the differences of the rollup's cumulative counts between two
-- snapshots (kept in the *_total columns), so their sum over every snapshot is exact.
CREATE TABLE queue_history (
    queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
    at timestamptz NOT NULL,
    ready bigint NOT NULL,
    in_flight bigint NOT NULL,
    delayed bigint NOT NULL,
    dead_letters bigint NOT NULL,
    enqueued bigint NOT NULL,
    delivered bigint NOT NULL,
    acknowledged bigint NOT NULL,
    dead_lettered bigint NOT NULL,
    expired bigint NOT NULL,
    enqueued_total bigint NOT NULL,
    delivered_total bigint NOT NULL,
    acknowledged_total bigint NOT NULL,
    dead_lettered_total bigint NOT NULL,
    expired_total bigint NOT NULL,
    PRIMARY KEY (queue_id, at)
);
CREATE INDEX queue_history_at_idx ON queue_history (at);
"""

# The counter row a message is counted in: the last byte of its id, so concurrent writers
# to one queue rarely share a counter row. Inlined by the planner.
SHARD_FUNCTION = """
CREATE FUNCTION retsu_shard(message_id uuid) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (get_byte(uuid_send(message_id), 15) & 31)::smallint $$;
"""

# Enqueue one message or a batch (all or nothing). A NULL ttl means the queue's default,
# read from the queue row in the same transaction; a delay must be shorter than the
# lifetime (SPEC §3.3). Answers whether the queue exists and, when a delay is too long,
# the 1-based position of the first such message (nothing is stored then).
ENQUEUE = f"""
CREATE FUNCTION retsu_enqueue(
    p_queue_id uuid, p_ids uuid[], p_payloads text[], p_priorities smallint[],
    p_ttls integer[], p_delays integer[], p_redriven_from uuid[] DEFAULT NULL)
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
             delivery_attempts, redriven_from)
        SELECT m.id, p_queue_id, m.payload, m.priority,
               CASE WHEN m.delay > 0 THEN {DELAYED} ELSE {READY} END, now(),
               now() + make_interval(secs => coalesce(m.ttl, v_default_ttl)),
               now() + make_interval(secs => m.delay), 0, p_redriven_from[m.o]
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

# Claim up to p_limit messages in delivery order (SPEC §3.3). Before claiming, bounded
# batches of exhausted messages move to dead letters: ended leases with no attempts left,
# and READY messages whose attempts a lowered limit has used up (found through the small
# retry index, never by walking the backlog). Ended leases with attempts left and ended
# delays compete with the head of the READY index; the losers become READY, in their FIFO
# place in that index. A paused queue claims nothing: the gate is the queue row itself,
# read in this transaction, so a pause stops every API process at once. The attempts limit
# and the visibility timeout are read from the queue row too, never from a cache, so a
# lowered limit can never allow one more delivery.
#
# Rows: one per claimed message, then one final row (id NULL) with queue_found, paused,
# dead_lettered (by this call) and, when nothing was claimed, the seconds until the
# queue's next delay or lease ends (a long poll sleeps until then). Commits with
# synchronous_commit off: a claim lost in a crash is a redelivery, which at-least-once
# delivery already allows.
DEQUEUE = f"""
CREATE FUNCTION retsu_dequeue(
    p_queue_id uuid, p_limit integer, p_visibility_timeout integer, p_batch integer,
    p_reason text)
RETURNS TABLE (
    id uuid, payload text, priority smallint, receipt_handle uuid, delivery_attempts integer,
    enqueued_at timestamptz, enqueue_order bigint, queue_found boolean, paused boolean,
    dead_lettered bigint, next_available_in double precision)
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
    v_visibility integer;
    v_paused boolean;
    v_claimed integer := 0;
    v_dead bigint := 0;
    r record;
BEGIN
    SELECT q.max_delivery_attempts, coalesce(p_visibility_timeout, q.visibility_timeout_seconds),
           q.paused
    INTO v_max, v_visibility, v_paused
    FROM queue AS q WHERE q.id = p_queue_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::uuid, NULL::text, NULL::smallint, NULL::uuid, NULL::integer,
            NULL::timestamptz, NULL::bigint, false, false, 0::bigint, NULL::double precision;
        RETURN;
    END IF;
    IF v_paused THEN
        RETURN QUERY SELECT NULL::uuid, NULL::text, NULL::smallint, NULL::uuid, NULL::integer,
            NULL::timestamptz, NULL::bigint, true, true, 0::bigint, NULL::double precision;
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    FOR r IN
        WITH exhausted AS (
            SELECT m.id FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts >= v_max
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), stale AS (
            SELECT m.id FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.delivery_attempts > 0
              AND m.delivery_attempts >= v_max AND m.expires_at > now()
            LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), due_leases AS (
            SELECT m.id, m.priority, m.enqueue_order, m.state
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts < v_max
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), due_delays AS (
            SELECT m.id, m.priority, m.enqueue_order, m.state
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {DELAYED}
              AND m.available_after <= now() AND m.expires_at > now()
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), ready AS (
            SELECT m.id, m.priority, m.enqueue_order, m.state
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.expires_at > now()
              AND m.delivery_attempts < v_max
            ORDER BY m.priority DESC, m.enqueue_order LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ), candidate AS (
            SELECT * FROM ready
            UNION ALL SELECT * FROM due_leases
            UNION ALL SELECT * FROM due_delays
        ), chosen AS (
            SELECT c.id, c.state FROM candidate AS c
            ORDER BY c.priority DESC, c.enqueue_order LIMIT p_limit
        ), claimed AS (
            UPDATE queue_message AS m
            SET state = {IN_FLIGHT}, delivery_attempts = m.delivery_attempts + 1,
                receipt_handle = gen_random_uuid(),
                available_after = now() + make_interval(secs => v_visibility),
                last_delivered_at = now()
            FROM chosen
            WHERE m.id = chosen.id
            RETURNING m.id, m.payload, m.priority, m.receipt_handle, m.delivery_attempts,
                      m.enqueued_at, m.enqueue_order, chosen.state AS was
        ), promoted AS (
            UPDATE queue_message AS m SET state = {READY}
            FROM candidate AS c
            WHERE m.id = c.id AND c.state <> {READY}
              AND m.id NOT IN (SELECT chosen.id FROM chosen)
            RETURNING m.id, m.priority, c.state AS was
        ), dead AS (
            DELETE FROM queue_message AS m
            USING (SELECT e.id FROM exhausted AS e UNION ALL SELECT s.id FROM stale AS s) AS x
            WHERE m.id = x.id
            RETURNING m.id, m.queue_id, m.enqueue_order, m.payload, m.priority,
                      m.delivery_attempts, m.enqueued_at, m.last_delivered_at, m.state AS was
        ), buried AS (
            INSERT INTO queue_dead_letter_message
                (id, queue_id, enqueue_order, payload, priority, delivery_attempts,
                 enqueued_at, last_delivered_at, dead_lettered_at, reason)
            SELECT d.id, d.queue_id, d.enqueue_order, d.payload, d.priority,
                   d.delivery_attempts, d.enqueued_at, d.last_delivered_at, now(), p_reason
            FROM dead AS d
            RETURNING 1
        ), deltas AS (
            SELECT x.priority, retsu_shard(x.id) AS shard,
                   -(x.was = {READY})::int AS ready, (x.was <> {IN_FLIGHT})::int AS in_flight,
                   -(x.was = {DELAYED})::int AS delayed, 1 AS delivered, 0 AS dead
            FROM claimed AS x
            UNION ALL
            SELECT x.priority, retsu_shard(x.id), 1, -(x.was = {IN_FLIGHT})::int,
                   -(x.was = {DELAYED})::int, 0, 0
            FROM promoted AS x
            UNION ALL
            SELECT x.priority, retsu_shard(x.id), -(x.was = {READY})::int,
                   -(x.was = {IN_FLIGHT})::int, 0, 0, 1
            FROM dead AS x
        ), counted AS (
            UPDATE queue_state_rollup AS c
            SET ready = c.ready + d.ready, in_flight = c.in_flight + d.in_flight,
                delayed = c.delayed + d.delayed, delivered = c.delivered + d.delivered,
                dead_letters = c.dead_letters + d.dead, dead_lettered = c.dead_lettered + d.dead
            FROM (SELECT deltas.priority, deltas.shard, sum(deltas.ready) AS ready,
                         sum(deltas.in_flight) AS in_flight, sum(deltas.delayed) AS delayed,
                         sum(deltas.delivered) AS delivered, sum(deltas.dead) AS dead
                  FROM deltas GROUP BY 1, 2 ORDER BY 1, 2) AS d
            WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard
            RETURNING 1
        )
        SELECT claimed.id, claimed.payload, claimed.priority, claimed.receipt_handle,
               claimed.delivery_attempts, claimed.enqueued_at, claimed.enqueue_order,
               (SELECT count(*) FROM buried) AS buried
        FROM (SELECT 1) AS one LEFT JOIN claimed ON true
    LOOP
        v_dead := r.buried;  -- the same on every row
        IF r.id IS NOT NULL THEN
            v_claimed := v_claimed + 1;
            id := r.id; payload := r.payload; priority := r.priority;
            receipt_handle := r.receipt_handle; delivery_attempts := r.delivery_attempts;
            enqueued_at := r.enqueued_at; enqueue_order := r.enqueue_order;
            queue_found := true; paused := false; dead_lettered := NULL;
            next_available_in := NULL;
            RETURN NEXT;
        END IF;
    END LOOP;
    id := NULL; payload := NULL; priority := NULL; receipt_handle := NULL;
    delivery_attempts := NULL; enqueued_at := NULL; enqueue_order := NULL;
    queue_found := true; paused := false; dead_lettered := v_dead;
    next_available_in := NULL;
    IF v_claimed = 0 THEN
        SELECT extract(epoch FROM min(u.at) - now())::double precision INTO next_available_in
        FROM (
            (SELECT m.available_after AS at FROM queue_message AS m
             WHERE m.queue_id = p_queue_id AND m.state = {DELAYED} AND m.available_after > now()
             ORDER BY m.available_after LIMIT 1)
            UNION ALL
            (SELECT m.available_after FROM queue_message AS m
             WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
               AND m.available_after > now()
             ORDER BY m.available_after LIMIT 1)
        ) AS u;
    END IF;
    RETURN NEXT;
END
$$;
"""

# Remove each message whose handle is its current, unexpired delivery (SPEC §3.3). Found by
# primary key only: "state + 0" keeps the partial lease index (whose walk would grow with
# the messages in flight) out of the plan.
ACKNOWLEDGE = f"""
CREATE FUNCTION retsu_acknowledge(p_queue_id uuid, p_ids uuid[], p_handles uuid[])
RETURNS TABLE (queue_found boolean, removed bigint)
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH removed AS (
        DELETE FROM queue_message AS m
        WHERE m.id = ANY (p_ids) AND m.queue_id = p_queue_id AND m.state + 0 = {IN_FLIGHT}
          AND m.receipt_handle = p_handles[array_position(p_ids, m.id)]
          AND m.available_after > now()
        RETURNING m.id, m.priority
    ), counted AS (
        UPDATE queue_state_rollup AS c
        SET in_flight = c.in_flight - d.n, acknowledged = c.acknowledged + d.n
        FROM (SELECT r.priority, retsu_shard(r.id) AS shard, count(*) AS n
              FROM removed AS r GROUP BY 1, 2 ORDER BY 1, 2) AS d
        WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM queue AS q WHERE q.id = p_queue_id),
           (SELECT count(*) FROM removed);
END
$$;
"""

# A new lease end for the current, unexpired delivery (0 = released now; the attempt
# still counts). The message stays IN_FLIGHT: a released lease is an ended lease.
CHANGE_VISIBILITY = f"""
CREATE FUNCTION retsu_change_visibility(
    p_queue_id uuid, p_id uuid, p_handle uuid, p_timeout integer)
RETURNS TABLE (queue_found boolean, changed bigint)
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH changed AS (
        UPDATE queue_message AS m
        SET available_after = now() + make_interval(secs => p_timeout)
        WHERE m.id = p_id AND m.queue_id = p_queue_id AND m.state + 0 = {IN_FLIGHT}
          AND m.receipt_handle = p_handle AND m.available_after > now()
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM queue AS q WHERE q.id = p_queue_id),
           (SELECT count(*) FROM changed);
END
$$;
"""


# Exact state per queue and priority (SPEC §3.2 counting rules), for GET /v1/queues/{id}
# (one queue) and the collector (p_queue_id NULL: every queue, zeros included). The rollup
# gives the physical counts; time turns some rows into something else without a write, so
# each correction reads only the rows in that transition, through its own index: expired
# READY rows (expiry index), READY rows a lowered attempts limit left with none (retry
# index), ended leases (lease index), ended delays (delay index). Ages come from the head of
# the READY index per priority, the oldest ended lease or delay, and the active leases. No
# part reads the backlog itself. A function, so its plans are pinned like the hot path's.
STATE_QUERY = """
WITH scope AS (
    SELECT q.id, q.name, q.max_delivery_attempts FROM queue AS q {queue_filter}
), rollup AS (
    SELECT r.queue_id, r.priority, sum(r.ready) AS ready, sum(r.in_flight) AS in_flight,
           sum(r.delayed) AS delayed, sum(r.dead_letters) AS dead_letters
    FROM scope JOIN queue_state_rollup AS r ON r.queue_id = scope.id
    GROUP BY r.queue_id, r.priority
), expired AS MATERIALIZED (
    SELECT m.queue_id, m.priority, m.state
    FROM queue_message AS m
    WHERE m.expires_at <= now() AND m.state <> {in_flight}
    ORDER BY m.expires_at
), expired_ready AS (
    SELECT x.queue_id, x.priority, count(*) AS n
    FROM expired AS x
    WHERE x.state = {ready} {expired_filter}
    GROUP BY x.queue_id, x.priority
), stale AS (
    SELECT m.queue_id, m.priority, count(*) AS n
    FROM scope CROSS JOIN LATERAL (
        SELECT s.queue_id, s.priority FROM queue_message AS s
        WHERE s.queue_id = scope.id AND s.state = {ready} AND s.delivery_attempts > 0
          AND s.delivery_attempts >= scope.max_delivery_attempts AND s.expires_at > now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), elapsed AS (
    SELECT m.queue_id, m.priority, count(*) AS n,
           count(*) FILTER (WHERE m.retryable) AS retryable,
           min(m.enqueued_at) FILTER (WHERE m.retryable) AS oldest_retryable
    FROM scope CROSS JOIN LATERAL (
        SELECT e.queue_id, e.priority, e.enqueued_at,
               e.expires_at > now() AND e.delivery_attempts < scope.max_delivery_attempts
                   AS retryable
        FROM queue_message AS e
        WHERE e.queue_id = scope.id AND e.state = {in_flight} AND e.available_after <= now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), due AS (
    SELECT m.queue_id, m.priority, count(*) AS n, count(*) FILTER (WHERE m.live) AS live,
           min(m.enqueued_at) FILTER (WHERE m.live) AS oldest_live
    FROM scope CROSS JOIN LATERAL (
        SELECT d.queue_id, d.priority, d.enqueued_at, d.expires_at > now() AS live
        FROM queue_message AS d
        WHERE d.queue_id = scope.id AND d.state = {delayed} AND d.available_after <= now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), leased AS (
    SELECT m.queue_id, m.priority, min(m.enqueued_at) AS oldest
    FROM scope CROSS JOIN LATERAL (
        SELECT l.queue_id, l.priority, l.enqueued_at FROM queue_message AS l
        WHERE l.queue_id = scope.id AND l.state = {in_flight} AND l.available_after > now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), heads AS (
    SELECT scope.id AS queue_id, p.priority,
        (SELECT h.enqueued_at FROM queue_message AS h
         WHERE h.queue_id = scope.id AND h.state = {ready} AND h.priority = p.priority
           AND h.expires_at + interval '0' > now()
           AND h.delivery_attempts + 0 < scope.max_delivery_attempts
         ORDER BY h.enqueue_order LIMIT 1) AS oldest_ready
    FROM scope CROSS JOIN (VALUES (1::smallint), (2::smallint), (3::smallint)) AS p(priority)
)
SELECT scope.id, scope.name, heads.priority,
       greatest(coalesce(r.ready, 0) - coalesce(x.n, 0) - coalesce(st.n, 0)
                + coalesce(e.retryable, 0) + coalesce(du.live, 0), 0)::bigint,
       greatest(coalesce(r.in_flight, 0) - coalesce(e.n, 0), 0)::bigint,
       greatest(coalesce(r.delayed, 0) - coalesce(du.n, 0), 0)::bigint,
       coalesce(r.dead_letters, 0)::bigint,
       greatest(coalesce(extract(epoch FROM now() - least(heads.oldest_ready,
                e.oldest_retryable, du.oldest_live)), 0), 0)::double precision,
       greatest(coalesce(extract(epoch FROM now() - lz.oldest), 0), 0)::double precision
FROM scope
JOIN heads ON heads.queue_id = scope.id
LEFT JOIN rollup AS r ON r.queue_id = scope.id AND r.priority = heads.priority
LEFT JOIN expired_ready AS x ON x.queue_id = scope.id AND x.priority = heads.priority
LEFT JOIN stale AS st ON st.queue_id = scope.id AND st.priority = heads.priority
LEFT JOIN elapsed AS e ON e.queue_id = scope.id AND e.priority = heads.priority
LEFT JOIN due AS du ON du.queue_id = scope.id AND du.priority = heads.priority
LEFT JOIN leased AS lz ON lz.queue_id = scope.id AND lz.priority = heads.priority
ORDER BY scope.name, heads.priority DESC
"""


def _state_query(one_queue: bool) -> str:
    return STATE_QUERY.format(
        queue_filter="WHERE q.id = p_queue_id" if one_queue else "",
        expired_filter="AND x.queue_id = p_queue_id" if one_queue else "",
        ready=READY,
        in_flight=IN_FLIGHT,
        delayed=DELAYED,
    )


STATE = """
CREATE FUNCTION retsu_queue_state(p_queue_id uuid)
RETURNS TABLE (
    queue_id uuid, queue_name text, priority smallint, ready bigint, in_flight bigint,
    delayed bigint, dead_letters bigint, oldest_ready_age_seconds double precision,
    oldest_in_flight_age_seconds double precision)
LANGUAGE plpgsql STABLE {PINNED}
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue_id IS NULL THEN
        RETURN QUERY {all_queues};
    ELSE
        RETURN QUERY {one_queue};
    END IF;
END
$$;
"""


def upgrade() -> None:
    op.execute(SHARD_FUNCTION)
    # One command per execute (asyncpg runs each as a prepared statement).
    for statement in SCHEMA.split(";\n"):
        if statement.strip():
            op.execute(statement)
    op.execute(ENQUEUE)
    op.execute(DEQUEUE)
    op.execute(ACKNOWLEDGE)
    op.execute(CHANGE_VISIBILITY)
    op.execute(
        STATE.format(PINNED=PINNED, all_queues=_state_query(False), one_queue=_state_query(True))
    )


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
