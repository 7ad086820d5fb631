"""Browsing messages without claiming them (SPEC §3.6): the logical state as one function,
and the page walk as a function with pinned plans.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

* ``retsu_message_state``: a message's logical state by the counting rules of SPEC §3.2
  (1 ready, 2 in flight, 3 delayed, NULL in none), from its physical state, times and
  attempts and its queue's attempts limit. An inlinable SQL function, so listing,
  showing and deleting a message share one copy of the rule.
* ``retsu_browse_messages``: one page of a queue's live messages in the order of the
  asked state. No new index — every index a message write maintains costs the hot path —
  so each list walks an index migration 0005 already keeps, in the list's order, and
  stops after ``p_limit`` matches:

  - every live message, enqueue order: ``queue_message_browse_idx``;
  - ready, delivery order: ``queue_message_ready_idx`` one priority at a time, merged
    with the rows a dequeue has not yet moved back to READY (ended leases with attempts
    left, ended delays), read through the lease and delay indexes by their end — the rows
    in transition, as the queue stats read them;
  - in flight: ``queue_message_lease_idx`` from now (or the cursor) on;
  - delayed: ``queue_message_delay_idx`` from now (or the cursor) on.

  A filter no index serves (a priority on the enqueue-order, lease or delay walks; the
  rows in none of the states) is checked row by row, and one page examines at most
  ``p_budget`` rows: when the budget ends a page first, the final row says where the walk
  stopped, and the next page goes on from there. So a page costs at most ``p_budget``
  index entries whatever the backlog. Like the hot path's functions its planner settings
  are pinned (no sequential or bitmap scans, generic plans), so the walk never turns into
  "read everything, then sort" when statistics are stale.

  Rows: one per message found (``state`` logical), then one final row (``id`` NULL) with
  ``queue_found`` and, when the budget ended the walk, ``resume`` and the key of the last
  row examined (``priority``, ``available_at``, ``enqueue_order``).
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

READY, IN_FLIGHT, DELAYED = 1, 2, 3
MIN_ORDER = -9223372036854775808
MAX_ORDER = 9223372036854775807

PINNED = (
    "SET enable_seqscan = off SET enable_bitmapscan = off "
    "SET plan_cache_mode = force_generic_plan SET jit = off"
)

MESSAGE_STATE = f"""
CREATE FUNCTION retsu_message_state(
    p_state smallint, p_available_after timestamptz, p_expires_at timestamptz,
    p_attempts integer, p_max_attempts integer)
RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_available_after > now() THEN
            CASE WHEN p_state = {IN_FLIGHT} THEN {IN_FLIGHT}::smallint
                 ELSE {DELAYED}::smallint END
        WHEN p_expires_at <= now() OR p_attempts >= p_max_attempts THEN NULL::smallint
        ELSE {READY}::smallint
    END
$$;
"""

_COLUMNS = (
    "m.id, m.payload, m.priority, m.state, m.delivery_attempts, m.enqueued_at, m.expires_at, "
    "m.available_after, m.last_delivered_at, m.redriven_from, m.enqueue_order"
)

# What each examined row goes through: counted against the budget; returned when it is in
# the asked state (any state when none was asked) and of an asked priority.
_EXAMINE = """
            v_seen := v_seen + 1;
            v_state := retsu_message_state(
                r.state, r.available_after, r.expires_at, r.delivery_attempts, v_max);
            IF v_state IS NOT NULL AND (p_state IS NULL OR v_state = p_state)
               AND r.priority BETWEEN p_min_priority AND p_max_priority THEN
                id := r.id; payload := r.payload; priority := r.priority; state := v_state;
                delivery_attempts := r.delivery_attempts; enqueued_at := r.enqueued_at;
                expires_at := r.expires_at; available_at := r.available_after;
                last_delivered_at := r.last_delivered_at; redriven_from := r.redriven_from;
                enqueue_order := r.enqueue_order; queue_found := true; resume := false;
                RETURN NEXT;
                v_found := v_found + 1;
                EXIT WHEN v_found >= p_limit;
            END IF;
"""

# In flight and delayed: by (available_after, enqueue_order) from the later of now and the
# cursor. One row comparison is the index condition, so the walk starts at that point.
_TIMED_WALK = f"""
        IF p_after_at IS NULL OR p_after_at <= now() THEN
            v_from_at := now();
            v_from_order := {MAX_ORDER};
        ELSE
            v_from_at := p_after_at;
            v_from_order := p_after_order;
        END IF;
        FOR r IN
            SELECT {_COLUMNS} FROM queue_message AS m
            WHERE m.queue_id = p_queue_id AND m.state = {{physical}}
              AND (m.available_after, m.enqueue_order) > (v_from_at, v_from_order)
            ORDER BY m.available_after, m.enqueue_order
            LIMIT p_budget
        LOOP
{_EXAMINE}
        END LOOP;
"""

BROWSE = f"""
CREATE FUNCTION retsu_browse_messages(
    p_queue_id uuid, p_state smallint, p_min_priority smallint, p_max_priority smallint,
    p_limit integer, p_budget integer,
    p_after_priority smallint, p_after_at timestamptz, p_after_order bigint)
RETURNS TABLE (
    id uuid, payload text, priority smallint, state smallint, delivery_attempts integer,
    enqueued_at timestamptz, expires_at timestamptz, available_at timestamptz,
    last_delivered_at timestamptz, redriven_from uuid, enqueue_order bigint,
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

    IF p_state IS NULL THEN
        FOR r IN
            SELECT {_COLUMNS} FROM queue_message AS m
            WHERE m.queue_id = p_queue_id
              AND m.enqueue_order > coalesce(p_after_order, {MIN_ORDER})
            ORDER BY m.enqueue_order
            LIMIT p_budget
        LOOP
{_EXAMINE}
        END LOOP;
    ELSIF p_state = {READY} THEN
        -- One priority at a time, highest first: each walks the READY index by enqueue
        -- order, merged with that priority's rows in transition.
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
                ) AS u
                ORDER BY u.enqueue_order
                LIMIT p_budget - v_seen
            LOOP
{_EXAMINE}
            END LOOP;
            EXIT WHEN v_found >= p_limit OR v_seen >= p_budget;
        END LOOP;
    ELSIF p_state = {IN_FLIGHT} THEN
{_TIMED_WALK.format(physical=IN_FLIGHT)}
    ELSE
{_TIMED_WALK.format(physical=DELAYED)}
    END IF;

    id := NULL; payload := NULL; priority := NULL; state := NULL; delivery_attempts := NULL;
    enqueued_at := NULL; expires_at := NULL; available_at := NULL; last_delivered_at := NULL;
    redriven_from := NULL; enqueue_order := NULL; queue_found := true; resume := false;
    IF v_found < p_limit AND v_seen >= p_budget THEN
        -- The budget ended the walk: the next page goes on after the last row examined.
        priority := r.priority; available_at := r.available_after;
        enqueue_order := r.enqueue_order; resume := true;
    END IF;
    RETURN NEXT;
END
$$;
"""


def upgrade() -> None:
    op.execute(MESSAGE_STATE)
    op.execute(BROWSE)


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
