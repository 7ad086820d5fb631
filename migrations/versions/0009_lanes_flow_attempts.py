"""Groups as ordered lanes, fair service, concurrency caps and rate limits (SPEC §3.10);
attempts, completed messages and results (§3.11); unclaiming an undeliverable response
(§3.1).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

**New physical states.** 4 WAITING: a grouped message behind its group's head (counted as
ready); 5 WAITING_DELAYED: the same with its own delay still running (counted as delayed);
6 COMPLETED: acknowledged and kept for ``completed_retention_seconds`` (no live count);
7 THROTTLED: a group's head parked until its group's next token (counted as ready, found
again through the delay index like a delay that ended). Only a group's *pending head* is
READY, DELAYED or THROTTLED, so the claim index never holds more than one message per
group: a backlog of a million in one group costs a claim nothing.

**Lanes (``queue_group``).** One row per group with live messages: how many are leased,
pending (0 or 1: the head), waiting and waiting-delayed, the key of its last delivery and its
token bucket. ``retsu_group_apply`` is the one place lane bookkeeping happens: every writer
(enqueue, claim, acknowledge, delete, purge, expiry, dead-lettering, unclaim) passes it the
counter changes of the grouped messages it touched, and it promotes each group's next
message (the oldest waiting one, by enqueue order) while the group has no pending head and
fewer leases than ``group_max_in_flight``.

**Fair service.** The claim order is (priority, wait key). An ungrouped message's wait key is
its enqueue order (plain FIFO, as before: it stays NULL and the ungrouped claim index keeps
``enqueue_order``); a group's head gets ``greatest(enqueue_order, last_delivery_key)``, where
``last_delivery_key`` is drawn from the same sequence at each delivery of the group — so a
group that was just served queues up behind everything that waited before (SPEC §3.10's
"later of its own enqueue time and its group's most recent delivery", in sequence order).

**Limits.** ``max_in_flight``: claims of the queue serialise on a transaction advisory lock,
and new leases are at most the cap minus the physical in-flight count (the rollup's sum:
ended leases count until a claim takes them again, so the cap is never exceeded, at worst
briefly under-used). ``rate_limit``: a token bucket row per queue (``queue_rate_bucket``),
locked by the claim. ``group_rate_limit``: each group's bucket on its row, locked by the
claim for the groups it may deliver from; a group out of tokens has its head THROTTLED until
the next one. Ungrouped queues without limits take the fast path: the single claim
statement of migration 0005, plus the attempt record.

**Attempts (SPEC §3.11).** ``queue_message.attempts`` is a JSON array, one object per
delivery ``{"n","at","c"(consumer),"end","out","err"}``, appended by the claim (which also
closes the previous one as ``lease_expired`` when it ended without a word) and closed by a
release (``released``, with the visibility change's ``error``) or an acknowledge that keeps the
message (``acknowledged``). At most ``max_delivery_attempts`` ≤ 100 entries ever. Dead letters
keep the array and ``last_error``.

**Completed messages.** With ``completed_retention_seconds`` > 0 an acknowledge turns the row
COMPLETED (``completed_at``, ``result``) instead of deleting it; the live indexes leave
COMPLETED rows out; ``queue_state_rollup.completed`` counts them.

Counting: the rollup's ``ready`` counts states 1, 4, 7; ``delayed`` 3, 5; ``in_flight`` 2;
``completed`` 6; ``groups`` the groups with a live message.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

READY, IN_FLIGHT, DELAYED, WAITING, WAITING_DELAYED, COMPLETED, THROTTLED = 1, 2, 3, 4, 5, 6, 7
# The physical states each counter counts.
COUNTED_READY = f"({READY}, {WAITING}, {THROTTLED})"
COUNTED_DELAYED = f"({DELAYED}, {WAITING_DELAYED})"
# States a claim finds through the delay index by the time they end.
TIMED = f"({DELAYED}, {THROTTLED})"
LIVE = f"({READY}, {IN_FLIGHT}, {DELAYED}, {WAITING}, {WAITING_DELAYED}, {THROTTLED})"

PINNED = (
    "SET enable_seqscan = off SET enable_bitmapscan = off "
    "SET plan_cache_mode = force_generic_plan SET jit = off"
)
SEQUENCE = "queue_message_enqueue_order_seq"
MIN_ORDER = -9223372036854775808
MAX_ORDER = 9223372036854775807

SCHEMA = f"""
LOCK TABLE queue_message, queue_dead_letter_message IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE queue_message
    DROP CONSTRAINT queue_message_state_known,
    ADD CONSTRAINT queue_message_state_known CHECK (state BETWEEN 1 AND 7),
    ADD COLUMN wait_key bigint,
    ADD COLUMN attempts jsonb,
    ADD COLUMN completed_at timestamptz,
    ADD COLUMN result text;

ALTER TABLE queue_dead_letter_message
    ADD COLUMN attempts jsonb,
    ADD COLUMN last_error text;

ALTER TABLE queue_state_rollup
    ADD COLUMN completed bigint NOT NULL DEFAULT 0,
    ADD COLUMN groups bigint NOT NULL DEFAULT 0,
    DROP CONSTRAINT queue_state_rollup_never_negative,
    ADD CONSTRAINT queue_state_rollup_never_negative
        CHECK (ready >= 0 AND in_flight >= 0 AND delayed >= 0 AND dead_letters >= 0
               AND completed >= 0 AND groups >= 0);

CREATE TABLE queue_group (
    queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
    group_key text NOT NULL,
    leased integer NOT NULL DEFAULT 0,
    pending integer NOT NULL DEFAULT 0,
    waiting integer NOT NULL DEFAULT 0,
    waiting_delayed integer NOT NULL DEFAULT 0,
    -- The wait key of the group's head (its pending head's, else its last delivery's): the
    -- groups list's order.
    head_key bigint NOT NULL DEFAULT 0,
    last_delivery_key bigint NOT NULL DEFAULT 0,
    last_delivered_at timestamptz,
    -- The group's token bucket (group_rate_limit); NULL: full.
    tokens double precision,
    tokens_at timestamptz,
    PRIMARY KEY (queue_id, group_key),
    CONSTRAINT queue_group_counts CHECK (
        leased >= 0 AND pending BETWEEN 0 AND 1 AND waiting >= 0 AND waiting_delayed >= 0)
);
-- Groups with a live message, by their head's wait (the groups list; the claim's "does
-- this queue have lanes at all").
CREATE INDEX queue_group_live_idx ON queue_group (queue_id, head_key, group_key)
    WHERE leased + pending + waiting + waiting_delayed > 0;

CREATE TABLE queue_rate_bucket (
    queue_id uuid PRIMARY KEY REFERENCES queue (id) ON DELETE CASCADE,
    tokens double precision NOT NULL,
    tokens_at timestamptz NOT NULL
);

DROP INDEX queue_message_ready_idx, queue_message_delay_idx, queue_message_browse_idx,
    queue_message_expiry_idx;
-- Claims of ungrouped messages: delivery order (priority, enqueue order), as before.
CREATE INDEX queue_message_ready_idx ON queue_message (queue_id, priority DESC, enqueue_order)
    WHERE state = {READY} AND group_key IS NULL;
-- Claims of group heads: (priority, wait key) — fair service.
CREATE INDEX queue_message_ready_group_idx
    ON queue_message (queue_id, priority DESC, wait_key)
    WHERE state = {READY} AND group_key IS NOT NULL;
-- Delays and throttled heads by their end.
CREATE INDEX queue_message_delay_idx ON queue_message (queue_id, available_after, enqueue_order)
    WHERE state IN {TIMED};
-- Waiting messages whose own delay runs (ended ones count as ready).
CREATE INDEX queue_message_waiting_delay_idx
    ON queue_message (queue_id, available_after, enqueue_order)
    WHERE state = {WAITING_DELAYED};
-- A group's members in order (promotion takes the oldest waiting one; the head).
CREATE INDEX queue_message_group_idx ON queue_message (queue_id, group_key, enqueue_order)
    WHERE group_key IS NOT NULL AND state <> {COMPLETED};
-- Browsing every live message in enqueue order.
CREATE INDEX queue_message_browse_idx ON queue_message (queue_id, enqueue_order)
    WHERE state <> {COMPLETED};
-- Browsing grouped messages that count as ready, in delivery order (priority, enqueue order).
CREATE INDEX queue_message_group_ready_idx
    ON queue_message (queue_id, priority DESC, enqueue_order)
    WHERE group_key IS NOT NULL AND state IN {COUNTED_READY};
-- The expired-message cleaner (rows in flight are found through their lease).
CREATE INDEX queue_message_expiry_idx ON queue_message (expires_at)
    WHERE state NOT IN ({IN_FLIGHT}, {COMPLETED});
-- Completed messages: newest completion first (browsing), the oldest (the cleaner).
CREATE INDEX queue_message_completed_idx ON queue_message (queue_id, completed_at, enqueue_order)
    WHERE state = {COMPLETED}
"""

# -- small pieces -----------------------------------------------------------------------

# Close a delivery's attempt record (the last element) when it is still open.
CLOSE_ATTEMPT = """
CREATE FUNCTION retsu_close_attempt(p_attempts jsonb, p_end timestamptz, p_outcome text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_attempts IS NULL OR jsonb_array_length(p_attempts) = 0
             OR (p_attempts -> -1) ? 'out' THEN p_attempts
        ELSE jsonb_set(p_attempts, ARRAY[(jsonb_array_length(p_attempts) - 1)::text],
                       (p_attempts -> -1)
                       || jsonb_build_object('end', p_end, 'out', p_outcome))
    END
$$;
"""

# A new attempt record: the previous one closed as ended by its lease (if it was not closed
# otherwise), then this delivery. ``p_lease_end`` is the row's available_after before the
# claim (the previous lease's end).
NEW_ATTEMPT = """
CREATE FUNCTION retsu_new_attempt(
    p_attempts jsonb, p_lease_end timestamptz, p_number integer, p_consumer text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(retsu_close_attempt(p_attempts, p_lease_end, 'lease_expired'), '[]'::jsonb)
           || jsonb_build_array(jsonb_build_object('n', p_number, 'at', now(), 'c', p_consumer))
$$;
"""

# The last error an attempt record holds (a dead letter's last_error).
LAST_ERROR = """
CREATE FUNCTION retsu_last_error(p_attempts jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.e ->> 'err'
    FROM jsonb_array_elements(coalesce(p_attempts, '[]'::jsonb)) WITH ORDINALITY AS a(e, i)
    WHERE a.e ? 'err' AND a.e ->> 'err' IS NOT NULL
    ORDER BY a.i DESC
    LIMIT 1
$$;
"""

# A queue's advisory lock key (the cap's serialisation point).
QUEUE_LOCK_KEY = "hashtextextended(p_queue_id::text, 82)"

# -- lanes ---------------------------------------------------------------------------------

# Apply counter changes to groups and promote each group's next message where it may have
# one. Each array holds one entry per changed message or group (summed here). The deltas
# are of leased (IN_FLIGHT), pending (READY/DELAYED/THROTTLED), waiting (4) and
# waiting-delayed (5) members; ``p_keys`` the delivery keys of claims (the group's last
# delivery is the greatest). A group whose live count goes from 0 to more, or to 0, moves the
# rollup's ``groups`` count. Rows are locked in group-key order, before any counter row, as
# everywhere.
GROUP_APPLY = f"""
CREATE FUNCTION retsu_group_apply(
    p_queue_id uuid, p_groups text[], p_leased integer[], p_pending integer[],
    p_waiting integer[], p_waiting_delayed integer[], p_keys bigint[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_n integer;
    v_rate double precision;
    v_burst integer;
    g record;
    h record;
    w record;
    v_tokens double precision;
    v_state smallint;
    v_until timestamptz;
    v_key bigint;
    v_promoted integer := 0;
    -- Counter changes, applied last (after every group row is locked): per (priority,
    -- shard), ready/delayed moves of promoted messages and the live-groups count.
    v_priorities smallint[] := '{{}}';
    v_shards smallint[] := '{{}}';
    v_ready integer[] := '{{}}';
    v_delayed integer[] := '{{}}';
    v_groups integer[] := '{{}}';
BEGIN
    IF p_groups IS NULL OR cardinality(p_groups) = 0 THEN
        RETURN 0;
    END IF;
    SELECT q.group_max_in_flight, q.group_rate_per_second, q.group_rate_burst
    INTO v_n, v_rate, v_burst
    FROM queue AS q WHERE q.id = p_queue_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- Every group row first, in key order (the lock order of every writer: message rows,
    -- then group rows, then counter rows).
    INSERT INTO queue_group AS c (queue_id, group_key)
    SELECT DISTINCT p_queue_id, d.group_key FROM unnest(p_groups) AS d(group_key)
    WHERE d.group_key IS NOT NULL
    ORDER BY 2
    ON CONFLICT (queue_id, group_key) DO NOTHING;
    PERFORM 1 FROM queue_group AS c
    WHERE c.queue_id = p_queue_id AND c.group_key = ANY (p_groups)
    ORDER BY c.group_key
    FOR UPDATE;
    FOR g IN
        SELECT d.group_key, sum(d.leased)::integer AS leased, sum(d.pending)::integer AS pending,
               sum(d.waiting)::integer AS waiting,
               sum(d.waiting_delayed)::integer AS waiting_delayed,
               max(d.key) AS key
        FROM unnest(p_groups, p_leased, p_pending, p_waiting, p_waiting_delayed,
                    coalesce(p_keys, array_fill(NULL::bigint, ARRAY[cardinality(p_groups)])))
             AS d(group_key, leased, pending, waiting, waiting_delayed, key)
        WHERE d.group_key IS NOT NULL
        GROUP BY d.group_key
        ORDER BY d.group_key
    LOOP
        SELECT c.leased + c.pending + c.waiting + c.waiting_delayed AS live INTO h
        FROM queue_group AS c WHERE c.queue_id = p_queue_id AND c.group_key = g.group_key;
        UPDATE queue_group AS c
        SET leased = c.leased + g.leased, pending = c.pending + g.pending,
            waiting = c.waiting + g.waiting,
            waiting_delayed = c.waiting_delayed + g.waiting_delayed,
            last_delivery_key = greatest(c.last_delivery_key, coalesce(g.key, 0)),
            last_delivered_at = CASE WHEN g.key IS NULL THEN c.last_delivered_at ELSE now() END,
            head_key = CASE WHEN g.key IS NULL THEN c.head_key ELSE greatest(c.head_key, g.key) END
        WHERE c.queue_id = p_queue_id AND c.group_key = g.group_key
        RETURNING c.*, h.live AS live_before INTO h;
        -- The next message of the lane, if it may have one now: the oldest waiting one.
        IF h.pending = 0 AND h.waiting + h.waiting_delayed > 0 AND h.leased < v_n THEN
            SELECT m.id, m.state, m.available_after, m.enqueue_order, m.priority
            INTO w FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.group_key = h.group_key
              AND m.state IN ({WAITING}, {WAITING_DELAYED})
            ORDER BY m.enqueue_order
            LIMIT 1
            FOR UPDATE;
            IF FOUND THEN
                v_key := greatest(w.enqueue_order, h.last_delivery_key);
                v_until := w.available_after;
                -- By the member's own state, not by the clock alone: a WAITING member counts as
                -- ready whatever now() says (a transaction that began before the enqueue
                -- committed sees an available_after in its future).
                IF w.state = {WAITING_DELAYED} AND w.available_after > now() THEN
                    v_state := {DELAYED};
                ELSE
                    v_state := {READY};
                    IF v_rate IS NOT NULL THEN
                        v_tokens := CASE WHEN h.tokens IS NULL THEN v_burst
                            ELSE least(v_burst, h.tokens
                                 + v_rate * extract(epoch FROM now() - h.tokens_at)) END;
                        IF v_tokens < 1 THEN
                            v_state := {THROTTLED};
                            v_until := now() + make_interval(secs => (1 - v_tokens) / v_rate);
                        END IF;
                    END IF;
                END IF;
                UPDATE queue_message AS m
                SET state = v_state, wait_key = v_key, available_after = v_until
                WHERE m.id = w.id;
                UPDATE queue_group AS c
                SET pending = 1, head_key = v_key,
                    waiting = c.waiting - (w.state = {WAITING})::int,
                    waiting_delayed = c.waiting_delayed - (w.state = {WAITING_DELAYED})::int
                WHERE c.queue_id = p_queue_id AND c.group_key = h.group_key;
                v_promoted := v_promoted + 1;
                -- A waiting message whose own delay ended counted as delayed: now ready.
                IF w.state = {WAITING_DELAYED} AND v_state <> {DELAYED} THEN
                    v_priorities := v_priorities || w.priority;
                    v_shards := v_shards || retsu_shard(w.id);
                    v_ready := v_ready || 1;
                    v_delayed := v_delayed || -1;
                    v_groups := v_groups || 0;
                END IF;
            END IF;
        END IF;
        -- A group that got its first live message, or lost its last, moves the count;
        -- spread over the counter rows by the group's name, so groups that come and go
        -- never meet on one row.
        IF (h.live_before = 0) <> (h.leased + h.pending + h.waiting + h.waiting_delayed = 0) THEN
            v_priorities := v_priorities || 2::smallint;
            v_shards := v_shards
                || (get_byte(decode(md5(h.group_key), 'hex'), 0) & 31)::smallint;
            v_ready := v_ready || 0;
            v_delayed := v_delayed || 0;
            v_groups := v_groups || CASE WHEN h.live_before = 0 THEN 1 ELSE -1 END;
        END IF;
    END LOOP;
    IF cardinality(v_priorities) > 0 THEN
        INSERT INTO queue_state_rollup AS r (queue_id, priority, shard, groups)
        SELECT p_queue_id, d.priority, d.shard, 0
        FROM unnest(v_priorities, v_shards) AS d(priority, shard)
        GROUP BY 2, 3 ORDER BY 2, 3
        ON CONFLICT (queue_id, priority, shard) DO NOTHING;
        UPDATE queue_state_rollup AS r
        SET ready = r.ready + d.ready, delayed = r.delayed + d.delayed, groups = r.groups + d.groups
        FROM (SELECT u.priority, u.shard, sum(u.ready) AS ready, sum(u.delayed) AS delayed,
                     sum(u.groups) AS groups
              FROM unnest(v_priorities, v_shards, v_ready, v_delayed, v_groups)
                   AS u(priority, shard, ready, delayed, groups)
              GROUP BY 1, 2 ORDER BY 1, 2) AS d
        WHERE r.queue_id = p_queue_id AND r.priority = d.priority AND r.shard = d.shard;
    END IF;
    RETURN v_promoted;
END
$$;
"""

# -- enqueue ------------------------------------------------------------------------------

# As migration 0007's, with lanes: a grouped message is stored WAITING (WAITING_DELAYED when
# its own delay runs) and ``retsu_group_apply`` makes it its group's head if the group has
# none and room for one. The batch's group rows are locked first (before any counter row).
ENQUEUE = f"""
CREATE OR REPLACE FUNCTION retsu_enqueue(
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
    v_groups text[];
    v_states smallint[];
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
    IF p_groups IS NULL OR NOT EXISTS (SELECT 1 FROM unnest(p_groups) AS g WHERE g IS NOT NULL)
    THEN
        -- No lanes: one statement, as before.
        WITH stored AS (
            INSERT INTO queue_message
                (id, queue_id, payload, priority, state, enqueued_at, expires_at,
                 available_after, delivery_attempts, redriven_from, schedule_id)
            SELECT m.id, p_queue_id, m.payload, m.priority,
                   CASE WHEN m.delay > 0 THEN {DELAYED} ELSE {READY} END, now(),
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
               count(*) FILTER (WHERE s.state = {READY}),
               count(*) FILTER (WHERE s.state = {DELAYED}), count(*)
        FROM stored AS s
        GROUP BY 2, 3
        ORDER BY 2, 3
        ON CONFLICT (queue_id, priority, shard) DO UPDATE
        SET ready = c.ready + excluded.ready, delayed = c.delayed + excluded.delayed,
            enqueued = c.enqueued + excluded.enqueued;
        RETURN QUERY SELECT true, NULL::integer;
        RETURN;
    END IF;
    -- The batch's groups, locked before anything else (every writer's lock order).
    INSERT INTO queue_group AS c (queue_id, group_key)
    SELECT DISTINCT p_queue_id, g FROM unnest(p_groups) AS g WHERE g IS NOT NULL ORDER BY 2
    ON CONFLICT (queue_id, group_key) DO NOTHING;
    PERFORM 1 FROM queue_group AS c
    WHERE c.queue_id = p_queue_id AND c.group_key = ANY (p_groups)
    ORDER BY c.group_key
    FOR UPDATE;
    WITH stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts, redriven_from, group_key, schedule_id)
        SELECT m.id, p_queue_id, m.payload, m.priority,
               CASE WHEN p_groups[m.o] IS NULL THEN
                        CASE WHEN m.delay > 0 THEN {DELAYED} ELSE {READY} END
                    ELSE CASE WHEN m.delay > 0 THEN {WAITING_DELAYED} ELSE {WAITING} END
               END, now(),
               now() + make_interval(secs => coalesce(m.ttl, v_default_ttl)),
               now() + make_interval(secs => m.delay), 0, p_redriven_from[m.o],
               p_groups[m.o], p_schedule_ids[m.o]
        FROM unnest(p_ids, p_payloads, p_priorities, p_ttls, p_delays)
             WITH ORDINALITY AS m(id, payload, priority, ttl, delay, o)
        ORDER BY m.o
        RETURNING id, priority, state, group_key
    )
    SELECT array_agg(s.group_key) FILTER (WHERE s.group_key IS NOT NULL),
           array_agg(s.state) FILTER (WHERE s.group_key IS NOT NULL)
    INTO v_groups, v_states
    FROM stored AS s;
    -- Waiting members join their lanes; a lane with no head and room gets one.
    PERFORM retsu_group_apply(
        p_queue_id, v_groups,
        array_fill(0, ARRAY[cardinality(v_groups)]),
        array_fill(0, ARRAY[cardinality(v_groups)]),
        (SELECT array_agg((s = {WAITING})::int) FROM unnest(v_states) AS s),
        (SELECT array_agg((s = {WAITING_DELAYED})::int) FROM unnest(v_states) AS s));
    INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, delayed, enqueued)
    SELECT p_queue_id, m.priority, retsu_shard(m.id),
           count(*) FILTER (WHERE m.delay = 0), count(*) FILTER (WHERE m.delay > 0), count(*)
    FROM unnest(p_ids, p_priorities, p_delays) AS m(id, priority, delay)
    GROUP BY 2, 3
    ORDER BY 2, 3
    ON CONFLICT (queue_id, priority, shard) DO UPDATE
    SET ready = c.ready + excluded.ready, delayed = c.delayed + excluded.delayed,
        enqueued = c.enqueued + excluded.enqueued;
    RETURN QUERY SELECT true, NULL::integer;
END
$$;
"""

# -- the claim ------------------------------------------------------------------------------

_CLAIM_COLUMNS = """
    id uuid, payload text, priority smallint, group_key text, receipt_handle uuid,
    delivery_attempts integer, enqueued_at timestamptz, enqueue_order bigint,
    queue_found boolean, paused boolean, dead_lettered bigint,
    next_available_in double precision, throttled text"""

# The final row of a claim (id NULL).
_FINAL = """
    id := NULL; payload := NULL; priority := NULL; group_key := NULL; receipt_handle := NULL;
    delivery_attempts := NULL; enqueued_at := NULL; enqueue_order := NULL;
    queue_found := true; paused := false; dead_lettered := v_dead;
    next_available_in := NULL; throttled := v_throttled;"""

# When nothing was claimed: the seconds until a delay, a parked head or a lease ends (a long
# poll sleeps until then, or until the queue's next token).
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
            UNION ALL
            SELECT v_token_at WHERE v_token_at IS NOT NULL
        ) AS u;
    END IF;"""

# The dead letter of a message (its attempt record closed as ended by its lease).
_BURY = """
            INSERT INTO queue_dead_letter_message
                (id, queue_id, enqueue_order, payload, priority, delivery_attempts,
                 enqueued_at, last_delivered_at, dead_lettered_at, reason, group_key,
                 attempts, last_error)
            SELECT d.id, d.queue_id, d.enqueue_order, d.payload, d.priority,
                   d.delivery_attempts, d.enqueued_at, d.last_delivered_at, now(), p_reason,
                   d.group_key, retsu_close_attempt(d.attempts, d.available_after, 'lease_expired'),
                   retsu_last_error(d.attempts)
            FROM dead AS d
            RETURNING 1"""

# Claim up to p_limit messages in delivery order (SPEC §3.3, §3.10). Exhausted messages
# move to dead letters first, in bounded batches. A paused queue claims nothing: the gate
# is the queue row itself, read in this transaction. Rows: one per claimed message, then
# one final row (id NULL) with queue_found, paused, dead_lettered, throttled (the limit
# that kept this claim from more messages: max_in_flight, rate_limit, group_rate_limit) and,
# when nothing was claimed, next_available_in. Commits with synchronous_commit off unless
# the database has a synchronous standby (``retsu_relax_commit``, migration 0008): a claim
# lost in a crash is a redelivery, which at-least-once delivery already allows.
#
# Fast path — no live group in the queue, no max_in_flight, no rate_limit: migration 0005's
# one statement (plus the attempt record). Otherwise the general path below.
DEQUEUE = f"""
CREATE FUNCTION retsu_dequeue(
    p_queue_id uuid, p_limit integer, p_visibility_timeout integer, p_batch integer,
    p_reason text, p_consumer text DEFAULT NULL)
RETURNS TABLE ({_CLAIM_COLUMNS})
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
    v_visibility integer;
    v_paused boolean;
    v_n integer;
    v_cap integer;
    v_rate double precision;
    v_burst integer;
    v_group_rate double precision;
    v_group_burst integer;
    v_claimed integer := 0;
    v_dead bigint := 0;
    v_throttled text := NULL;
    v_token_at timestamptz := NULL;
    r record;
BEGIN
    SELECT q.max_delivery_attempts, coalesce(p_visibility_timeout, q.visibility_timeout_seconds),
           q.paused, q.group_max_in_flight, q.max_in_flight, q.rate_per_second, q.rate_burst,
           q.group_rate_per_second, q.group_rate_burst
    INTO v_max, v_visibility, v_paused, v_n, v_cap, v_rate, v_burst, v_group_rate,
         v_group_burst
    FROM queue AS q WHERE q.id = p_queue_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::uuid, NULL::text, NULL::smallint, NULL::text, NULL::uuid,
            NULL::integer, NULL::timestamptz, NULL::bigint, false, false, 0::bigint,
            NULL::double precision, NULL::text;
        RETURN;
    END IF;
    IF v_paused THEN
        RETURN QUERY SELECT NULL::uuid, NULL::text, NULL::smallint, NULL::text, NULL::uuid,
            NULL::integer, NULL::timestamptz, NULL::bigint, true, true, 0::bigint,
            NULL::double precision, NULL::text;
        RETURN;
    END IF;
    PERFORM retsu_relax_commit();
    IF v_cap IS NOT NULL OR v_rate IS NOT NULL OR EXISTS (
        SELECT 1 FROM queue_group AS g
        WHERE g.queue_id = p_queue_id AND g.leased + g.pending + g.waiting + g.waiting_delayed > 0)
    THEN
        RETURN QUERY SELECT * FROM retsu_claim_flow(
            p_queue_id, p_limit, v_visibility, p_batch, p_reason, p_consumer);
        RETURN;
    END IF;
    FOR r IN
        WITH exhausted AS (
            SELECT m.id FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts >= v_max AND m.group_key IS NULL
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), stale AS (
            -- (queue_message_retry_idx; a grouped row, which only a race with a grouped
            -- enqueue could bring here, is left to the general path by ``dead``.)
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
              AND m.delivery_attempts < v_max AND m.group_key IS NULL
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), due_delays AS (
            SELECT m.id, m.priority, m.enqueue_order, m.state
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {DELAYED}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.group_key IS NULL
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), ready AS (
            SELECT m.id, m.priority, m.enqueue_order, m.state
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.group_key IS NULL
              AND m.expires_at > now() AND m.delivery_attempts < v_max
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
                last_delivered_at = now(),
                attempts = retsu_new_attempt(
                    m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer)
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
            WHERE m.id = x.id AND m.group_key IS NULL
            RETURNING m.id, m.queue_id, m.enqueue_order, m.payload, m.priority,
                      m.delivery_attempts, m.enqueued_at, m.last_delivered_at, m.state AS was,
                      m.group_key, m.attempts, m.available_after
        ), buried AS ({_BURY}
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
            id := r.id; payload := r.payload; priority := r.priority; group_key := NULL;
            receipt_handle := r.receipt_handle; delivery_attempts := r.delivery_attempts;
            enqueued_at := r.enqueued_at; enqueue_order := r.enqueue_order;
            queue_found := true; paused := false; dead_lettered := NULL;
            next_available_in := NULL; throttled := NULL;
            RETURN NEXT;
        END IF;
    END LOOP;{_FINAL}{_NEXT_AVAILABLE}
    RETURN NEXT;
END
$$;
"""

# The general path of a claim: lanes, the queue's cap and the token buckets (see the module
# docstring). Message rows are locked first (candidates, SKIP LOCKED), then the queue's
# bucket or cap, then group rows in key order, then counter rows — every writer's order.
CLAIM_FLOW = f"""
CREATE FUNCTION retsu_claim_flow(
    p_queue_id uuid, p_limit integer, p_visibility integer, p_batch integer,
    p_reason text, p_consumer text)
RETURNS TABLE ({_CLAIM_COLUMNS})
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
    v_n integer;
    v_cap integer;
    v_rate double precision;
    v_burst integer;
    v_group_rate double precision;
    v_group_burst integer;
    v_limit integer;
    v_tokens double precision;
    v_rate_cut boolean := false;
    v_new_allowed bigint := 2147483647;
    v_claimed integer := 0;
    v_new integer := 0;
    v_dead bigint := 0;
    v_throttled text := NULL;
    v_token_at timestamptz := NULL;
    -- candidates, in delivery order
    c_ids uuid[]; c_priorities smallint[]; c_states smallint[]; c_groups text[];
    c_keys bigint[]; c_orders bigint[];
    -- 0 for a head or an ungrouped message; n for a lane's n-th follower (step 5b)
    c_rounds integer[]; c_valid boolean[];
    -- the groups involved: group key -> {{leased, tokens}}
    v_gs jsonb := '{{}}';
    v_g jsonb;
    v_is_new boolean;
    v_chosen uuid[] := '{{}}';
    v_demote uuid[] := '{{}}';
    v_park uuid[] := '{{}}';
    v_park_until timestamptz[] := '{{}}';
    -- lane changes for retsu_group_apply
    l_groups text[] := '{{}}'; l_leased integer[] := '{{}}'; l_pending integer[] := '{{}}';
    l_waiting integer[] := '{{}}'; l_waiting_delayed integer[] := '{{}}'; l_keys bigint[] := '{{}}';
    -- counter changes: per message (priority, shard) deltas
    d_priorities smallint[] := '{{}}'; d_shards smallint[] := '{{}}';
    d_ready integer[] := '{{}}'; d_in_flight integer[] := '{{}}'; d_delayed integer[] := '{{}}';
    d_delivered integer[] := '{{}}'; d_dead integer[] := '{{}}';
    i integer;
    r record;
BEGIN
    SELECT q.max_delivery_attempts, q.group_max_in_flight, q.max_in_flight, q.rate_per_second,
           q.rate_burst, q.group_rate_per_second, q.group_rate_burst
    INTO v_max, v_n, v_cap, v_rate, v_burst, v_group_rate, v_group_burst
    FROM queue AS q WHERE q.id = p_queue_id;
    v_limit := p_limit;

    -- 1. Exhausted messages go to dead letters, before anything is claimed.
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
        ), dead AS (
            DELETE FROM queue_message AS m
            USING (SELECT e.id FROM exhausted AS e UNION ALL SELECT s.id FROM stale AS s) AS x
            WHERE m.id = x.id
            RETURNING m.id, m.queue_id, m.enqueue_order, m.payload, m.priority,
                      m.delivery_attempts, m.enqueued_at, m.last_delivered_at, m.state AS was,
                      m.group_key, m.attempts, m.available_after
        ), buried AS ({_BURY}
        )
        SELECT dead.id, dead.priority, dead.was, dead.group_key FROM dead
    LOOP
        v_dead := v_dead + 1;
        d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
        d_ready := d_ready || -(r.was = {READY})::int;
        d_in_flight := d_in_flight || -(r.was = {IN_FLIGHT})::int;
        d_delayed := d_delayed || 0; d_delivered := d_delivered || 0; d_dead := d_dead || 1;
        IF r.group_key IS NOT NULL THEN
            l_groups := l_groups || r.group_key;
            l_leased := l_leased || -(r.was = {IN_FLIGHT})::int;
            l_pending := l_pending || -(r.was <> {IN_FLIGHT})::int;
            l_waiting := l_waiting || 0; l_waiting_delayed := l_waiting_delayed || 0;
            l_keys := l_keys || NULL::bigint;
        END IF;
    END LOOP;

    -- 2. Waiting messages whose own delay ended now count as ready (bounded batches).
    FOR r IN
        WITH due AS (
            SELECT m.id FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {WAITING_DELAYED}
              AND m.available_after <= now()
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        )
        UPDATE queue_message AS m SET state = {WAITING}
        FROM due WHERE m.id = due.id
        RETURNING m.id, m.priority, m.group_key
    LOOP
        d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
        d_ready := d_ready || 1; d_in_flight := d_in_flight || 0; d_delayed := d_delayed || -1;
        d_delivered := d_delivered || 0; d_dead := d_dead || 0;
        l_groups := l_groups || r.group_key; l_leased := l_leased || 0;
        l_pending := l_pending || 0; l_waiting := l_waiting || 1;
        l_waiting_delayed := l_waiting_delayed || -1; l_keys := l_keys || NULL::bigint;
    END LOOP;

    -- 3. The queue's bucket and cap.
    IF v_rate IS NOT NULL THEN
        INSERT INTO queue_rate_bucket AS b (queue_id, tokens, tokens_at)
        VALUES (p_queue_id, v_burst, now())
        ON CONFLICT (queue_id) DO NOTHING;
        SELECT least(v_burst, b.tokens + v_rate * extract(epoch FROM now() - b.tokens_at))
        INTO v_tokens
        FROM queue_rate_bucket AS b WHERE b.queue_id = p_queue_id
        FOR UPDATE;
        IF floor(v_tokens) < v_limit THEN
            v_limit := greatest(floor(v_tokens), 0)::integer;
            v_rate_cut := true;
        END IF;
        IF v_tokens < 1 THEN
            v_token_at := now() + make_interval(secs => (1 - v_tokens) / v_rate);
        END IF;
    END IF;
    IF v_cap IS NOT NULL THEN
        -- Claims of a capped queue one at a time: each sees the leases the last one made.
        PERFORM pg_advisory_xact_lock({QUEUE_LOCK_KEY});
        -- The rollup does not yet hold step 1's changes (written at the end): the
        -- exhausted leases this claim buried are not in flight, and never use the cap
        -- (SPEC §3.3: an exhausted message never hides a deliverable one).
        SELECT greatest(
                   v_cap - coalesce(sum(c.in_flight), 0)
                   - (SELECT coalesce(sum(x), 0) FROM unnest(d_in_flight) AS x),
                   0)
        INTO v_new_allowed
        FROM queue_state_rollup AS c WHERE c.queue_id = p_queue_id;
    END IF;

    -- 4. Candidates, message rows locked (SKIP LOCKED), in delivery order.
    IF v_limit > 0 THEN
        WITH ready_plain AS (
            SELECT m.id, m.priority, m.enqueue_order AS k, m.enqueue_order AS o, m.state,
                   m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.group_key IS NULL
              AND m.expires_at > now() AND m.delivery_attempts < v_max
            ORDER BY m.priority DESC, m.enqueue_order LIMIT v_limit
            FOR UPDATE SKIP LOCKED
        ), ready_grouped AS (
            SELECT m.id, m.priority, m.wait_key AS k, m.enqueue_order AS o, m.state,
                   m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.group_key IS NOT NULL
              AND m.expires_at > now() AND m.delivery_attempts < v_max
            ORDER BY m.priority DESC, m.wait_key LIMIT v_limit
            FOR UPDATE SKIP LOCKED
        ), due_leases AS (
            SELECT m.id, m.priority, coalesce(m.wait_key, m.enqueue_order) AS k,
                   m.enqueue_order AS o, m.state, m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts < v_max
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        ), due_timed AS (
            SELECT m.id, m.priority, coalesce(m.wait_key, m.enqueue_order) AS k,
                   m.enqueue_order AS o, m.state, m.group_key
            FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state IN {TIMED}
              AND m.available_after <= now() AND m.expires_at > now()
              AND m.delivery_attempts < v_max
            ORDER BY m.available_after, m.enqueue_order LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        )
        SELECT array_agg(u.id ORDER BY u.priority DESC, u.k, u.o),
               array_agg(u.priority ORDER BY u.priority DESC, u.k, u.o),
               array_agg(u.state ORDER BY u.priority DESC, u.k, u.o),
               array_agg(u.group_key ORDER BY u.priority DESC, u.k, u.o),
               array_agg(u.k ORDER BY u.priority DESC, u.k, u.o),
               array_agg(u.o ORDER BY u.priority DESC, u.k, u.o)
        INTO c_ids, c_priorities, c_states, c_groups, c_keys, c_orders
        FROM (
            SELECT * FROM ready_plain
            UNION ALL SELECT * FROM ready_grouped
            UNION ALL SELECT * FROM due_leases
            UNION ALL SELECT * FROM due_timed
        ) AS u;
    ELSIF v_rate_cut AND EXISTS (
        SELECT 1 FROM queue_message AS m
        WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.expires_at > now())
    THEN
        v_throttled := 'rate_limit';
    END IF;

    -- 5. The groups of the candidates and of the dead, locked in key order.
    IF cardinality(c_groups) > 0 OR cardinality(l_groups) > 0 THEN
        PERFORM 1 FROM queue_group AS g
        WHERE g.queue_id = p_queue_id
          AND g.group_key = ANY (coalesce(c_groups, '{{}}') || l_groups)
        ORDER BY g.group_key
        FOR UPDATE;
        SELECT coalesce(jsonb_object_agg(g.group_key, jsonb_build_object(
                   'leased', g.leased,
                   'tokens', CASE WHEN v_group_rate IS NULL THEN NULL
                                  WHEN g.tokens IS NULL THEN v_group_burst
                                  ELSE least(v_group_burst, g.tokens + v_group_rate
                                             * extract(epoch FROM now() - g.tokens_at)) END,
                   'used', 0)), '{{}}')
        INTO v_gs
        FROM queue_group AS g
        WHERE g.queue_id = p_queue_id AND g.group_key = ANY (coalesce(c_groups, '{{}}'));
    END IF;

    -- 5b. Followers. A lane with room for more leases than its head (group_max_in_flight
    -- > 1) may give one claim several messages, in its order: after each pending head
    -- come the lane's next members, up to its room — each behind every head of this claim,
    -- as if promoted at the head's delivery (round n: the lane's n-th follower). Listed
    -- with the group row locked, then locked themselves with SKIP LOCKED: a lane gives
    -- only the unbroken run of waiting, deliverable members it could lock.
    IF v_n > 1 AND cardinality(c_ids) > 0 AND v_limit > 1 AND EXISTS (
        SELECT 1 FROM unnest(c_groups, c_states) AS h(group_key, state)
        WHERE h.group_key IS NOT NULL AND h.state <> {IN_FLIGHT})
    THEN
        WITH heads AS (
            SELECT h.priority, h.k, h.o, h.group_key
            FROM unnest(c_priorities, c_keys, c_orders, c_groups, c_states)
                 AS h(priority, k, o, group_key, state)
            WHERE h.group_key IS NOT NULL AND h.state <> {IN_FLIGHT}
        ), listed AS (
            SELECT f.id, h.priority, h.k, f.enqueue_order AS o, f.state, f.live, h.group_key,
                   row_number() OVER (PARTITION BY h.group_key ORDER BY f.enqueue_order)
                       AS round
            FROM heads AS h
            JOIN queue_group AS g ON g.queue_id = p_queue_id AND g.group_key = h.group_key
            CROSS JOIN LATERAL (
                SELECT m.id, m.enqueue_order, m.state,
                       m.expires_at > now() AND m.delivery_attempts < v_max AS live
                FROM queue_message AS m
                WHERE m.queue_id = p_queue_id AND m.group_key = h.group_key
                  AND m.state <> {COMPLETED} AND m.enqueue_order > h.o
                ORDER BY m.enqueue_order
                LIMIT greatest(least(v_n - g.leased - 1, v_limit - 1), 0)
            ) AS f
        ), locked AS (
            SELECT m.id FROM queue_message AS m
            WHERE m.id IN (SELECT l.id FROM listed AS l WHERE l.state = {WAITING} AND l.live)
              AND m.state = {WAITING}
            FOR UPDATE SKIP LOCKED
        ), everything AS (
            SELECT c.id, c.priority, c.state, c.group_key, c.k, c.o, 0::bigint AS round,
                   true AS valid
            FROM unnest(c_ids, c_priorities, c_states, c_groups, c_keys, c_orders)
                 AS c(id, priority, state, group_key, k, o)
            UNION ALL
            SELECT l.id, l.priority, l.state, l.group_key, l.k, l.o, l.round,
                   l.id IN (SELECT locked.id FROM locked)
            FROM listed AS l
        )
        SELECT array_agg(e.id ORDER BY e.priority DESC, e.round, e.k, e.o),
               array_agg(e.priority ORDER BY e.priority DESC, e.round, e.k, e.o),
               array_agg(e.state ORDER BY e.priority DESC, e.round, e.k, e.o),
               array_agg(e.group_key ORDER BY e.priority DESC, e.round, e.k, e.o),
               array_agg(e.round::integer ORDER BY e.priority DESC, e.round, e.k, e.o),
               array_agg(e.valid ORDER BY e.priority DESC, e.round, e.k, e.o)
        INTO c_ids, c_priorities, c_states, c_groups, c_rounds, c_valid
        FROM everything AS e;
    ELSE
        c_rounds := array_fill(0, ARRAY[coalesce(cardinality(c_ids), 0)]);
        c_valid := array_fill(true, ARRAY[coalesce(cardinality(c_ids), 0)]);
    END IF;

    -- 6. Choose, in delivery order, within every limit. A lane whose message is passed
    -- over (stopped) gives nothing after it in this claim: its order holds.
    FOR i IN 1 .. coalesce(cardinality(c_ids), 0) LOOP
        IF v_claimed >= v_limit THEN
            EXIT;
        END IF;
        v_is_new := c_states[i] <> {IN_FLIGHT};
        IF c_groups[i] IS NOT NULL AND c_rounds[i] > 0 THEN
            -- A follower: only while its lane has given every member before it.
            IF NOT c_valid[i] OR (v_gs -> c_groups[i] ? 'stop') THEN
                v_gs := jsonb_set(v_gs, ARRAY[c_groups[i], 'stop'], 'true');
                CONTINUE;
            END IF;
        END IF;
        IF v_is_new AND v_new >= v_new_allowed THEN
            v_throttled := coalesce(v_throttled, 'max_in_flight');
            IF c_groups[i] IS NOT NULL THEN
                v_gs := jsonb_set(v_gs, ARRAY[c_groups[i], 'stop'], 'true');
            END IF;
            CONTINUE;
        END IF;
        IF c_groups[i] IS NOT NULL THEN
            v_g := v_gs -> c_groups[i];
            IF v_is_new AND (v_g ->> 'leased')::int >= v_n THEN
                -- A head whose group is at its (lowered) cap: back to waiting.
                IF c_rounds[i] = 0 THEN
                    v_demote := v_demote || c_ids[i];
                END IF;
                v_gs := jsonb_set(v_gs, ARRAY[c_groups[i], 'stop'], 'true');
                CONTINUE;
            END IF;
            IF v_group_rate IS NOT NULL AND (v_g ->> 'tokens')::float8 < 1 THEN
                v_throttled := coalesce(v_throttled, 'group_rate_limit');
                IF v_is_new AND c_rounds[i] = 0 THEN
                    v_park := v_park || c_ids[i];
                    v_park_until := v_park_until || (now() + make_interval(
                        secs => (1 - (v_g ->> 'tokens')::float8) / v_group_rate));
                END IF;
                v_gs := jsonb_set(v_gs, ARRAY[c_groups[i], 'stop'], 'true');
                CONTINUE;
            END IF;
            v_gs := jsonb_set(v_gs, ARRAY[c_groups[i]], v_g || jsonb_build_object(
                'leased', (v_g ->> 'leased')::int + v_is_new::int,
                'tokens', CASE WHEN v_group_rate IS NULL THEN NULL
                               ELSE (v_g ->> 'tokens')::float8 - 1 END,
                'used', (v_g ->> 'used')::int + 1));
        END IF;
        v_chosen := v_chosen || c_ids[i];
        v_claimed := v_claimed + 1;
        v_new := v_new + v_is_new::int;
    END LOOP;
    -- The bucket cut this claim short when more was deliverable than it allowed.
    IF v_rate_cut AND v_claimed = v_limit AND (
        cardinality(c_ids) > v_claimed
        OR EXISTS (SELECT 1 FROM queue_message AS m
                   WHERE m.queue_id = p_queue_id AND m.state = {READY} AND m.group_key IS NULL
                     AND m.expires_at > now() AND NOT (m.id = ANY (v_chosen)))
        OR EXISTS (SELECT 1 FROM queue_message AS m
                   WHERE m.queue_id = p_queue_id AND m.state = {READY}
                     AND m.group_key IS NOT NULL AND m.expires_at > now()
                     AND NOT (m.id = ANY (v_chosen))))
    THEN
        v_throttled := coalesce(v_throttled, 'rate_limit');
    END IF;

    -- 7. The claims.
    FOR r IN
        WITH chosen AS (
            SELECT c.id, c.was FROM unnest(c_ids, c_states) AS c(id, was)
            WHERE c.id = ANY (v_chosen)
        )
        UPDATE queue_message AS m
        SET state = {IN_FLIGHT}, delivery_attempts = m.delivery_attempts + 1,
            receipt_handle = gen_random_uuid(),
            available_after = now() + make_interval(secs => p_visibility),
            last_delivered_at = now(),
            attempts = retsu_new_attempt(
                m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer),
            wait_key = CASE WHEN m.group_key IS NULL THEN m.wait_key
                            ELSE nextval('{SEQUENCE}') END
        FROM chosen
        WHERE m.id = chosen.id
        RETURNING m.id, m.payload, m.priority, m.group_key, m.receipt_handle,
                  m.delivery_attempts, m.enqueued_at, m.enqueue_order, m.wait_key,
                  chosen.was
    LOOP
        id := r.id; payload := r.payload; priority := r.priority; group_key := r.group_key;
        receipt_handle := r.receipt_handle; delivery_attempts := r.delivery_attempts;
        enqueued_at := r.enqueued_at; enqueue_order := r.enqueue_order;
        queue_found := true; paused := false; dead_lettered := NULL;
        next_available_in := NULL; throttled := NULL;
        RETURN NEXT;
        d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
        d_ready := d_ready || -(r.was IN {COUNTED_READY})::int;
        d_in_flight := d_in_flight || (r.was <> {IN_FLIGHT})::int;
        d_delayed := d_delayed || -(r.was = {DELAYED})::int;
        d_delivered := d_delivered || 1; d_dead := d_dead || 0;
        IF r.group_key IS NOT NULL THEN
            l_groups := l_groups || r.group_key;
            l_leased := l_leased || (r.was <> {IN_FLIGHT})::int;
            l_pending := l_pending || -(r.was IN ({READY}, {DELAYED}, {THROTTLED}))::int;
            l_waiting := l_waiting || -(r.was = {WAITING})::int;
            l_waiting_delayed := l_waiting_delayed || 0;
            l_keys := l_keys || r.wait_key;
        END IF;
    END LOOP;

    -- 8. Candidates that lost: ended delays and parked heads become READY (in their place in
    -- the claim order), ungrouped ended leases too; a grouped ended lease stays in flight
    -- (still leased in its lane) until a claim takes it. Followers that lost stay waiting.
    FOR r IN
        UPDATE queue_message AS m SET state = {READY}
        FROM unnest(c_ids, c_states, c_rounds) AS c(id, was, round)
        WHERE m.id = c.id AND NOT (c.id = ANY (v_chosen)) AND NOT (c.id = ANY (v_demote))
          AND NOT (c.id = ANY (v_park)) AND c.round = 0 AND c.was <> {READY}
          AND (c.was <> {IN_FLIGHT} OR m.group_key IS NULL)
        RETURNING m.id, m.priority, c.was
    LOOP
        d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
        d_ready := d_ready || (r.was NOT IN {COUNTED_READY})::int;
        d_in_flight := d_in_flight || -(r.was = {IN_FLIGHT})::int;
        d_delayed := d_delayed || -(r.was = {DELAYED})::int;
        d_delivered := d_delivered || 0; d_dead := d_dead || 0;
    END LOOP;
    -- Heads of groups at their cap wait again; heads out of tokens are parked.
    FOR r IN
        UPDATE queue_message AS m SET state = {WAITING}
        FROM unnest(c_ids, c_states) AS c(id, was)
        WHERE m.id = c.id AND c.id = ANY (v_demote)
        RETURNING m.id, m.priority, m.group_key, c.was
    LOOP
        d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
        d_ready := d_ready || (r.was = {DELAYED})::int; d_in_flight := d_in_flight || 0;
        d_delayed := d_delayed || -(r.was = {DELAYED})::int;
        d_delivered := d_delivered || 0; d_dead := d_dead || 0;
        l_groups := l_groups || r.group_key; l_leased := l_leased || 0;
        l_pending := l_pending || -1; l_waiting := l_waiting || 1;
        l_waiting_delayed := l_waiting_delayed || 0; l_keys := l_keys || NULL::bigint;
    END LOOP;
    FOR r IN
        UPDATE queue_message AS m SET state = {THROTTLED}, available_after = p.until
        FROM unnest(v_park, v_park_until) AS p(id, until)
        JOIN unnest(c_ids, c_states) AS c(id, was) ON c.id = p.id
        WHERE m.id = p.id
        RETURNING m.id, m.priority, c.was
    LOOP
        d_priorities := d_priorities || r.priority; d_shards := d_shards || retsu_shard(r.id);
        d_ready := d_ready || (r.was = {DELAYED})::int; d_in_flight := d_in_flight || 0;
        d_delayed := d_delayed || -(r.was = {DELAYED})::int;
        d_delivered := d_delivered || 0; d_dead := d_dead || 0;
    END LOOP;

    -- 9. The buckets: the groups' tokens spent, the queue's.
    IF v_group_rate IS NOT NULL AND v_gs <> '{{}}' THEN
        UPDATE queue_group AS g
        SET tokens = (v_gs -> g.group_key ->> 'tokens')::float8, tokens_at = now()
        WHERE g.queue_id = p_queue_id AND g.group_key IN (
            SELECT k FROM jsonb_object_keys(v_gs) AS k WHERE (v_gs -> k ->> 'used')::int > 0);
    END IF;
    IF v_rate IS NOT NULL THEN
        UPDATE queue_rate_bucket AS b SET tokens = v_tokens - v_claimed, tokens_at = now()
        WHERE b.queue_id = p_queue_id;
    END IF;

    -- 10. The lanes: leases taken, heads gone, the next ones promoted.
    PERFORM retsu_group_apply(
        p_queue_id, l_groups, l_leased, l_pending, l_waiting, l_waiting_delayed, l_keys);

    -- 11. The counters, last.
    IF cardinality(d_priorities) > 0 THEN
        UPDATE queue_state_rollup AS c
        SET ready = c.ready + d.ready, in_flight = c.in_flight + d.in_flight,
            delayed = c.delayed + d.delayed, delivered = c.delivered + d.delivered,
            dead_letters = c.dead_letters + d.dead, dead_lettered = c.dead_lettered + d.dead
        FROM (SELECT u.priority, u.shard, sum(u.ready) AS ready, sum(u.in_flight) AS in_flight,
                     sum(u.delayed) AS delayed, sum(u.delivered) AS delivered,
                     sum(u.dead) AS dead
              FROM unnest(d_priorities, d_shards, d_ready, d_in_flight, d_delayed,
                          d_delivered, d_dead)
                   AS u(priority, shard, ready, in_flight, delayed, delivered, dead)
              GROUP BY 1, 2 ORDER BY 1, 2) AS d
        WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard;
    END IF;
{_FINAL}{_NEXT_AVAILABLE}
    RETURN NEXT;
END
$$;
"""

# -- after a delivery -----------------------------------------------------------------------

# Acknowledge (SPEC §3.3): remove each message whose handle is its current, unexpired
# delivery — or, when the queue keeps completed messages (§3.11), turn it COMPLETED with its
# result and its attempt closed as acknowledged. ``wake``: something may have become
# deliverable (a lane's next message was promoted, or a capped queue got a free lease).
# Ungrouped queues that keep nothing: migration 0005's one statement.
ACKNOWLEDGE = f"""
CREATE FUNCTION retsu_acknowledge(
    p_queue_id uuid, p_ids uuid[], p_handles uuid[], p_results text[] DEFAULT NULL)
RETURNS TABLE (queue_found boolean, removed bigint, wake boolean)
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_retention integer;
    v_cap integer;
    v_removed bigint := 0;
    v_promoted integer := 0;
    l_groups text[] := '{{}}';
    d_priorities smallint[] := '{{}}';
    d_shards smallint[] := '{{}}';
    r record;
BEGIN
    PERFORM retsu_relax_commit();
    SELECT q.completed_retention_seconds, q.max_in_flight INTO v_retention, v_cap
    FROM queue AS q WHERE q.id = p_queue_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, 0::bigint, false;
        RETURN;
    END IF;
    -- The fast path when the queue has no live lane: the claim's own test, one entry of
    -- queue_group_live_idx. (Asking for a leased group instead walked every group row of
    -- the queue: 2 ms and ~150 buffers an ack over 10,000 groups, the groups benchmark.)
    IF v_retention = 0 AND NOT EXISTS (
        SELECT 1 FROM queue_group AS g
        WHERE g.queue_id = p_queue_id AND g.leased + g.pending + g.waiting + g.waiting_delayed > 0)
    THEN
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
        SELECT true, (SELECT count(*) FROM removed), v_cap IS NOT NULL
                                                     AND (SELECT count(*) FROM removed) > 0;
        RETURN;
    END IF;
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
    ELSE
        FOR r IN
            UPDATE queue_message AS m
            SET state = {COMPLETED}, completed_at = now(),
                result = p_results[array_position(p_ids, m.id)],
                attempts = retsu_close_attempt(m.attempts, now(), 'acknowledged')
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
    END IF;
    IF cardinality(l_groups) > 0 THEN
        v_promoted := retsu_group_apply(
            p_queue_id, l_groups, array_fill(-1, ARRAY[cardinality(l_groups)]),
            array_fill(0, ARRAY[cardinality(l_groups)]),
            array_fill(0, ARRAY[cardinality(l_groups)]),
            array_fill(0, ARRAY[cardinality(l_groups)]));
    END IF;
    UPDATE queue_state_rollup AS c
    SET in_flight = c.in_flight - d.n, acknowledged = c.acknowledged + d.n,
        completed = c.completed + CASE WHEN v_retention > 0 THEN d.n ELSE 0 END
    FROM (SELECT u.priority, u.shard, count(*) AS n
          FROM unnest(d_priorities, d_shards) AS u(priority, shard)
          GROUP BY 1, 2 ORDER BY 1, 2) AS d
    WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard;
    RETURN QUERY SELECT true, v_removed, v_promoted > 0 OR (v_cap IS NOT NULL AND v_removed > 0);
END
$$;
"""

# A new lease end for the current, unexpired delivery (0 = released now: its attempt closes as
# released). ``p_error`` (why the consumer gave it back) is recorded on the attempt.
CHANGE_VISIBILITY = f"""
CREATE FUNCTION retsu_change_visibility(
    p_queue_id uuid, p_id uuid, p_handle uuid, p_timeout integer, p_error text DEFAULT NULL)
RETURNS TABLE (queue_found boolean, changed bigint)
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
BEGIN
    PERFORM retsu_relax_commit();
    RETURN QUERY
    WITH changed AS (
        UPDATE queue_message AS m
        SET available_after = now() + make_interval(secs => p_timeout),
            attempts = CASE
                WHEN p_timeout = 0 THEN retsu_close_attempt(
                    CASE WHEN p_error IS NULL OR m.attempts IS NULL THEN m.attempts
                         ELSE jsonb_set(m.attempts, '{{-1,err}}', to_jsonb(p_error)) END,
                    now(), 'released')
                WHEN p_error IS NULL OR m.attempts IS NULL THEN m.attempts
                ELSE jsonb_set(m.attempts, '{{-1,err}}', to_jsonb(p_error))
            END
        WHERE m.id = p_id AND m.queue_id = p_queue_id AND m.state + 0 = {IN_FLIGHT}
          AND m.receipt_handle = p_handle AND m.available_after > now()
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM queue AS q WHERE q.id = p_queue_id),
           (SELECT count(*) FROM changed);
END
$$;
"""

# Take back deliveries whose response never reached their consumer (SPEC §3.1: a client
# that disconnected): each current delivery's lease ends now, its attempt is not counted
# (the attempt record and the delivery count go back), so the next claim delivers it again
# at once, in its place. A grouped one stays its lane's lease until then.
UNCLAIM = f"""
CREATE FUNCTION retsu_unclaim(p_queue_id uuid, p_ids uuid[], p_handles uuid[])
RETURNS bigint
LANGUAGE plpgsql {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_count bigint;
BEGIN
    PERFORM retsu_relax_commit();
    WITH taken AS (
        UPDATE queue_message AS m
        SET available_after = now(), delivery_attempts = m.delivery_attempts - 1,
            receipt_handle = gen_random_uuid(),
            attempts = CASE WHEN jsonb_array_length(coalesce(m.attempts, '[]')) <= 1 THEN NULL
                            ELSE m.attempts - (-1) END,
            last_delivered_at = CASE
                WHEN jsonb_array_length(coalesce(m.attempts, '[]')) <= 1 THEN NULL
                ELSE (m.attempts -> -2 ->> 'at')::timestamptz END
        WHERE m.id = ANY (p_ids) AND m.queue_id = p_queue_id AND m.state + 0 = {IN_FLIGHT}
          AND m.receipt_handle = p_handles[array_position(p_ids, m.id)]
          AND m.available_after > now()
        RETURNING m.id, m.priority
    ), counted AS (
        UPDATE queue_state_rollup AS c
        SET delivered = c.delivered - d.n
        FROM (SELECT t.priority, retsu_shard(t.id) AS shard, count(*) AS n
              FROM taken AS t GROUP BY 1, 2 ORDER BY 1, 2) AS d
        WHERE c.queue_id = p_queue_id AND c.priority = d.priority AND c.shard = d.shard
        RETURNING 1
    )
    SELECT count(*) INTO v_count FROM taken;
    RETURN v_count;
END
$$;
"""

# -- reading state ----------------------------------------------------------------------------

# Exact state per queue and priority (SPEC §3.2 counting rules, §3.10 groups, §3.11 completed)
# — migration 0005's query with the new states: the rollup's physical counts corrected, each
# through its own index, for what time changed without a write (expired rows counted ready,
# READY rows a lowered attempts limit left with none, ended leases, ended delays — of
# DELAYED and of waiting messages). Ages come from the heads of both ready indexes per
# priority (grouped messages waiting behind their head count as ready, with their age).
STATE_QUERY = f"""
WITH scope AS (
    SELECT q.id, q.name, q.max_delivery_attempts FROM queue AS q {{queue_filter}}
), rollup AS (
    SELECT r.queue_id, r.priority, sum(r.ready) AS ready, sum(r.in_flight) AS in_flight,
           sum(r.delayed) AS delayed, sum(r.dead_letters) AS dead_letters,
           sum(r.completed) AS completed, sum(r.groups) AS groups
    FROM scope JOIN queue_state_rollup AS r ON r.queue_id = scope.id
    GROUP BY r.queue_id, r.priority
), expired AS MATERIALIZED (
    SELECT m.queue_id, m.priority, m.state
    FROM queue_message AS m
    WHERE m.expires_at <= now() AND m.state NOT IN ({IN_FLIGHT}, {COMPLETED})
    ORDER BY m.expires_at
), expired_ready AS (
    SELECT x.queue_id, x.priority, count(*) AS n
    FROM expired AS x
    WHERE x.state IN {COUNTED_READY} {{expired_filter}}
    GROUP BY x.queue_id, x.priority
), stale AS (
    SELECT m.queue_id, m.priority, count(*) AS n
    FROM scope CROSS JOIN LATERAL (
        SELECT s.queue_id, s.priority FROM queue_message AS s
        WHERE s.queue_id = scope.id AND s.state = {READY} AND s.delivery_attempts > 0
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
        WHERE e.queue_id = scope.id AND e.state = {IN_FLIGHT} AND e.available_after <= now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), due AS (
    SELECT m.queue_id, m.priority, count(*) AS n, count(*) FILTER (WHERE m.live) AS live,
           min(m.enqueued_at) FILTER (WHERE m.live) AS oldest_live
    FROM scope CROSS JOIN LATERAL (
        (SELECT d.queue_id, d.priority, d.enqueued_at, d.expires_at > now() AS live
         FROM queue_message AS d
         WHERE d.queue_id = scope.id AND d.state IN {TIMED} AND d.state = {DELAYED}
           AND d.available_after <= now())
        UNION ALL
        (SELECT d.queue_id, d.priority, d.enqueued_at, d.expires_at > now() AS live
         FROM queue_message AS d
         WHERE d.queue_id = scope.id AND d.state = {WAITING_DELAYED}
           AND d.available_after <= now())
    ) AS m
    GROUP BY m.queue_id, m.priority
), leased AS (
    SELECT m.queue_id, m.priority, min(m.enqueued_at) AS oldest
    FROM scope CROSS JOIN LATERAL (
        SELECT l.queue_id, l.priority, l.enqueued_at FROM queue_message AS l
        WHERE l.queue_id = scope.id AND l.state = {IN_FLIGHT} AND l.available_after > now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), heads AS (
    SELECT scope.id AS queue_id, p.priority,
        least(
            (SELECT h.enqueued_at FROM queue_message AS h
             WHERE h.queue_id = scope.id AND h.state = {READY} AND h.group_key IS NULL
               AND h.priority = p.priority
               AND h.expires_at + interval '0' > now()
               AND h.delivery_attempts + 0 < scope.max_delivery_attempts
             ORDER BY h.enqueue_order LIMIT 1),
            (SELECT h.enqueued_at FROM queue_message AS h
             WHERE h.queue_id = scope.id AND h.group_key IS NOT NULL
               AND h.state IN {COUNTED_READY} AND h.priority = p.priority
               AND h.expires_at + interval '0' > now()
               AND h.delivery_attempts + 0 < scope.max_delivery_attempts
             ORDER BY h.enqueue_order LIMIT 1)) AS oldest_ready
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
       greatest(coalesce(extract(epoch FROM now() - lz.oldest), 0), 0)::double precision,
       coalesce(r.completed, 0)::bigint,
       coalesce(r.groups, 0)::bigint
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
    )


STATE = """
CREATE FUNCTION retsu_queue_state(p_queue_id uuid)
RETURNS TABLE (
    queue_id uuid, queue_name text, priority smallint, ready bigint, in_flight bigint,
    delayed bigint, dead_letters bigint, oldest_ready_age_seconds double precision,
    oldest_in_flight_age_seconds double precision, completed bigint, groups bigint)
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

# -- browsing ------------------------------------------------------------------------------

# A message's logical state (SPEC §3.2, §3.11): 1 ready, 2 in flight, 3 delayed, 6 completed,
# NULL in none. A waiting or parked grouped message is ready; one whose own delay runs is
# delayed.
MESSAGE_STATE = f"""
CREATE OR REPLACE FUNCTION retsu_message_state(
    p_state smallint, p_available_after timestamptz, p_expires_at timestamptz,
    p_attempts integer, p_max_attempts integer)
RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_state = {COMPLETED} THEN {COMPLETED}::smallint
        WHEN p_state = {IN_FLIGHT} AND p_available_after > now() THEN {IN_FLIGHT}::smallint
        WHEN p_state IN {COUNTED_DELAYED} AND p_available_after > now() THEN {DELAYED}::smallint
        WHEN p_expires_at <= now() OR p_attempts >= p_max_attempts THEN NULL::smallint
        ELSE {READY}::smallint
    END
$$;
"""

# A payload as JSON, or NULL when it is not JSON (search: SPEC §3.11's match).
TRY_JSONB = """
CREATE FUNCTION retsu_jsonb(p_text text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    RETURN p_text::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
"""

_COLUMNS = (
    "m.id, m.payload, m.priority, m.state, m.delivery_attempts, m.enqueued_at, m.expires_at, "
    "m.available_after, m.last_delivered_at, m.redriven_from, m.enqueue_order, m.group_key, "
    "m.schedule_id, m.attempts, m.completed_at, m.result"
)

# What each examined row goes through: counted against the budget; returned when it is in
# the asked state (any live state when none was asked), of an asked priority, of the asked
# group, and its payload contains the asked JSON.
_EXAMINE = f"""
            v_seen := v_seen + 1;
            v_state := retsu_message_state(
                r.state, r.available_after, r.expires_at, r.delivery_attempts, v_max);
            IF v_state IS NOT NULL
               AND (p_state IS NULL AND v_state <> {COMPLETED} OR v_state = p_state)
               AND r.priority BETWEEN p_min_priority AND p_max_priority
               AND (p_group IS NULL OR r.group_key = p_group)
               AND (p_match IS NULL OR retsu_jsonb(r.payload) @> p_match) THEN
                id := r.id; payload := r.payload; priority := r.priority; state := v_state;
                delivery_attempts := r.delivery_attempts; enqueued_at := r.enqueued_at;
                expires_at := r.expires_at; available_at := r.available_after;
                last_delivered_at := r.last_delivered_at; redriven_from := r.redriven_from;
                enqueue_order := r.enqueue_order; group_key := r.group_key;
                schedule_id := r.schedule_id; attempts := r.attempts;
                completed_at := r.completed_at; result := r.result;
                queue_found := true; resume := false;
                RETURN NEXT;
                v_found := v_found + 1;
                EXIT WHEN v_found >= p_limit;
            END IF;
"""

# In flight: by (available_after, enqueue_order) from the later of now and the cursor.
_TIMED_FROM = f"""
        IF p_after_at IS NULL OR p_after_at <= now() THEN
            v_from_at := now();
            v_from_order := {MAX_ORDER};
        ELSE
            v_from_at := p_after_at;
            v_from_order := p_after_order;
        END IF;"""

BROWSE = f"""
CREATE FUNCTION retsu_browse_messages(
    p_queue_id uuid, p_state smallint, p_min_priority smallint, p_max_priority smallint,
    p_limit integer, p_budget integer,
    p_after_priority smallint, p_after_at timestamptz, p_after_order bigint,
    p_group text DEFAULT NULL, p_match jsonb DEFAULT NULL)
RETURNS TABLE (
    id uuid, payload text, priority smallint, state smallint, delivery_attempts integer,
    enqueued_at timestamptz, expires_at timestamptz, available_at timestamptz,
    last_delivered_at timestamptz, redriven_from uuid, enqueue_order bigint,
    group_key text, schedule_id uuid, attempts jsonb, completed_at timestamptz, result text,
    queue_found boolean, resume boolean)
LANGUAGE plpgsql STABLE {PINNED}
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
    v_seen integer := 0;
    v_found integer := 0;
    v_state smallint;
    v_after bigint;
    v_from_at timestamptz;
    v_from_order bigint;
    v_priority integer;
    r record;
BEGIN
    SELECT q.max_delivery_attempts INTO v_max FROM queue AS q WHERE q.id = p_queue_id;
    queue_found := FOUND;
    resume := false;
    IF NOT queue_found THEN
        RETURN NEXT;
        RETURN;
    END IF;

    IF p_state IS NULL OR (p_group IS NOT NULL AND p_state = {READY}) THEN
        -- Every live message (or one group's ready ones: a lane's delivery order is its
        -- enqueue order), in enqueue order. One group: its own index, so the budget counts
        -- the group's rows, not the whole backlog's (a group with no message is one probe;
        -- an "OR p_group IS NULL" in one statement walked the backlog: 14,169 buffers over
        -- 135,000 messages).
        IF p_group IS NULL THEN
            FOR r IN
                SELECT {_COLUMNS} FROM queue_message AS m
                WHERE m.queue_id = p_queue_id AND m.state <> {COMPLETED}
                  AND m.enqueue_order > coalesce(p_after_order, {MIN_ORDER})
                ORDER BY m.enqueue_order
                LIMIT p_budget
            LOOP
{_EXAMINE}
            END LOOP;
        ELSE
            FOR r IN
                SELECT {_COLUMNS} FROM queue_message AS m
                WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                  AND m.state <> {COMPLETED}
                  AND m.enqueue_order > coalesce(p_after_order, {MIN_ORDER})
                ORDER BY m.enqueue_order
                LIMIT p_budget
            LOOP
{_EXAMINE}
            END LOOP;
        END IF;
    ELSIF p_state = {READY} THEN
        -- One priority at a time, highest first: the ready indexes by enqueue order, merged
        -- with that priority's rows in transition (ended leases, ended delays).
        FOR v_priority IN REVERSE
            least(p_max_priority, coalesce(p_after_priority, p_max_priority))::integer
            .. p_min_priority::integer
        LOOP
            v_after := CASE WHEN v_priority = p_after_priority THEN p_after_order
                            ELSE {MIN_ORDER} END;
            FOR r IN
                SELECT u.* FROM (
                    (SELECT {_COLUMNS} FROM queue_message AS m
                     WHERE m.queue_id = p_queue_id AND m.state = {READY}
                       AND m.group_key IS NULL
                       AND m.priority = v_priority AND m.enqueue_order > v_after
                     ORDER BY m.enqueue_order
                     LIMIT p_budget - v_seen)
                    UNION ALL
                    (SELECT {_COLUMNS} FROM queue_message AS m
                     WHERE m.queue_id = p_queue_id AND m.group_key IS NOT NULL
                       AND m.state IN {COUNTED_READY}
                       AND m.priority = v_priority AND m.enqueue_order > v_after
                     ORDER BY m.enqueue_order
                     LIMIT p_budget - v_seen)
                    UNION ALL
                    (SELECT {_COLUMNS} FROM queue_message AS m
                     WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
                       AND m.available_after <= now()
                       AND m.priority = v_priority AND m.enqueue_order > v_after)
                    UNION ALL
                    (SELECT {_COLUMNS} FROM queue_message AS m
                     WHERE m.queue_id = p_queue_id AND m.state = {DELAYED}
                       AND m.available_after <= now()
                       AND m.priority = v_priority AND m.enqueue_order > v_after)
                    UNION ALL
                    (SELECT {_COLUMNS} FROM queue_message AS m
                     WHERE m.queue_id = p_queue_id AND m.state = {WAITING_DELAYED}
                       AND m.available_after <= now()
                       AND m.priority = v_priority AND m.enqueue_order > v_after)
                ) AS u
                ORDER BY u.enqueue_order
                LIMIT p_budget - v_seen
            LOOP
{_EXAMINE}
            END LOOP;
            EXIT WHEN v_found >= p_limit OR v_seen >= p_budget;
        END LOOP;
    ELSIF p_state = {IN_FLIGHT} THEN
{_TIMED_FROM}
        FOR r IN
            SELECT {_COLUMNS} FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {IN_FLIGHT}
              AND (m.available_after, m.enqueue_order) > (v_from_at, v_from_order)
            ORDER BY m.available_after, m.enqueue_order
            LIMIT p_budget
        LOOP
{_EXAMINE}
        END LOOP;
    ELSIF p_state = {DELAYED} THEN
{_TIMED_FROM}
        FOR r IN
            SELECT u.* FROM (
                (SELECT {_COLUMNS} FROM queue_message AS m
                 WHERE m.queue_id = p_queue_id AND m.state = {DELAYED}
                   AND (m.available_after, m.enqueue_order) > (v_from_at, v_from_order)
                 ORDER BY m.available_after, m.enqueue_order
                 LIMIT p_budget)
                UNION ALL
                (SELECT {_COLUMNS} FROM queue_message AS m
                 WHERE m.queue_id = p_queue_id AND m.state = {WAITING_DELAYED}
                   AND (m.available_after, m.enqueue_order) > (v_from_at, v_from_order)
                 ORDER BY m.available_after, m.enqueue_order
                 LIMIT p_budget)
            ) AS u
            ORDER BY u.available_after, u.enqueue_order
            LIMIT p_budget
        LOOP
{_EXAMINE}
        END LOOP;
    ELSE
        -- Completed, newest completion first.
        FOR r IN
            SELECT {_COLUMNS} FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {COMPLETED}
              AND (p_after_at IS NULL
                   OR (m.completed_at, m.enqueue_order) < (p_after_at, p_after_order))
            ORDER BY m.completed_at DESC, m.enqueue_order DESC
            LIMIT p_budget
        LOOP
{_EXAMINE}
        END LOOP;
    END IF;

    id := NULL; payload := NULL; priority := NULL; state := NULL; delivery_attempts := NULL;
    enqueued_at := NULL; expires_at := NULL; available_at := NULL; last_delivered_at := NULL;
    redriven_from := NULL; enqueue_order := NULL; group_key := NULL; schedule_id := NULL;
    attempts := NULL; completed_at := NULL; result := NULL;
    queue_found := true; resume := false;
    IF v_found < p_limit AND v_seen >= p_budget THEN
        -- The budget ended the walk: the next page goes on after the last row examined.
        priority := r.priority; enqueue_order := r.enqueue_order; resume := true;
        available_at := CASE WHEN p_state = {COMPLETED} THEN r.completed_at
                             ELSE r.available_after END;
    END IF;
    RETURN NEXT;
END
$$;
"""


def upgrade() -> None:
    # One command per execute (asyncpg runs each as a prepared statement).
    for statement in SCHEMA.split(";\n"):
        if statement.strip():
            op.execute(statement)
    op.execute("DROP FUNCTION retsu_dequeue(uuid, integer, integer, integer, text);")
    op.execute("DROP FUNCTION retsu_acknowledge(uuid, uuid[], uuid[])")
    op.execute("DROP FUNCTION retsu_change_visibility(uuid, uuid, uuid, integer)")
    op.execute("DROP FUNCTION retsu_queue_state(uuid)")
    op.execute(
        "DROP FUNCTION retsu_browse_messages("
        "uuid, smallint, smallint, smallint, integer, integer, smallint, timestamptz, bigint)"
    )
    for function in (
        CLOSE_ATTEMPT,
        NEW_ATTEMPT,
        LAST_ERROR,
        TRY_JSONB,
        MESSAGE_STATE,
        GROUP_APPLY,
        ENQUEUE,
        CLAIM_FLOW,
        DEQUEUE,
        ACKNOWLEDGE,
        CHANGE_VISIBILITY,
        UNCLAIM,
        BROWSE,
    ):
        op.execute(function)
    op.execute(
        STATE.format(PINNED=PINNED, all_queues=_state_query(False), one_queue=_state_query(True))
    )


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
