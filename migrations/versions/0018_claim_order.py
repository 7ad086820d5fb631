"""A claim's messages come back in delivery order, and a claim's lanes draw their next wait
keys in it, whatever plan PostgreSQL chooses (SPEC §3.3: delivery order; §3.10: fair
service).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04

An ``UPDATE … FROM … RETURNING`` returns its rows, and evaluates its ``SET`` expressions, in
the order its join happens to visit them. Three claim functions relied on that order:

* ``retsu_dequeue`` (no groups) returned the claimed rows as its UPDATE produced them;
* ``retsu_claim_flow`` (groups with ``group_max_in_flight`` > 1, caps, rate limits) did the
  same, and drew each grouped message's new wait key with ``nextval`` in that order too;
* ``retsu_claim_lanes`` (one lease per group) sorted its answer, but drew the wait keys in
  the UPDATE's order.

With the statistics a migrated, then analysed, database has (``ANALYZE`` at the end of
migration 0017, or autovacuum on any database), the planner joined the other way round: the
contract suite's "fair service within one claim" (50 messages of group ``a``, then 3 of
``b`` and one without a group; a claim of 8) got ``a0 a1 a2 a3 b0 b1 b2 plain`` instead of
``a0 b0 plain`` first, and the lanes' next wait keys in that order, so the next claim
served ``a`` again before ``b`` (a group just served must queue up behind the others).

Now each function orders its answer by the delivery order it computed, and the wait keys
are drawn by a query that walks the claimed messages in that order first (a subquery with
ORDER BY is never flattened into its parent, so its rows reach the ``nextval`` above it
sorted). The cost: one sort of at most ``limit`` rows per claim.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_DEQUEUE = "retsu_dequeue(uuid, integer, integer, integer, text, text)"
_FLOW = "retsu_claim_flow(uuid, integer, integer, integer, text, text)"
_LANES = "retsu_claim_lanes(uuid, integer, integer, integer, text, text, integer)"

_DEQUEUE_ANSWER = """\
        FROM (SELECT 1) AS one LEFT JOIN claimed ON true
    LOOP
"""
_DEQUEUE_ANSWER_ORDERED = """\
        FROM (SELECT 1) AS one LEFT JOIN claimed ON true
        -- Rows in delivery order (an UPDATE's rows come in its plan's; migration 0018).
        ORDER BY claimed.priority DESC, claimed.enqueue_order
    LOOP
"""

_FLOW_CLAIMS = """\
        WITH chosen AS (
            SELECT c.id, c.was FROM unnest(c_ids, c_states) AS c(id, was)
            WHERE c.id = ANY (v_chosen)
        )
        UPDATE queue_message AS m
        SET state = 2, delivery_attempts = m.delivery_attempts + 1,
            receipt_handle = gen_random_uuid(),
            available_after = now() + make_interval(secs => p_visibility),
            last_delivered_at = now(),
            attempts = retsu_new_attempt(
                m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer),
            wait_key = CASE WHEN m.group_key IS NULL THEN m.wait_key
                            ELSE nextval('queue_message_enqueue_order_seq') END
        FROM chosen
        WHERE m.id = chosen.id
        RETURNING m.id, m.payload, m.priority, m.group_key, m.receipt_handle,
                  m.delivery_attempts, m.enqueued_at, m.enqueue_order, m.wait_key,
                  chosen.was
    LOOP
"""
_FLOW_CLAIMS_ORDERED = """\
        WITH chosen AS MATERIALIZED (
            -- In delivery order (v_chosen's), each grouped message's next wait key drawn
            -- in it: the lanes this claim served first wait first (migration 0018).
            SELECT c.id, c.was, c.pos,
                   CASE WHEN c.group_key IS NOT NULL
                        THEN nextval('queue_message_enqueue_order_seq') END AS key
            FROM (SELECT v.id, u.was, u.group_key, v.pos
                  FROM unnest(v_chosen) WITH ORDINALITY AS v(id, pos)
                  JOIN unnest(c_ids, c_states, c_groups) AS u(id, was, group_key)
                    ON u.id = v.id
                  ORDER BY v.pos) AS c
        ), claimed AS (
            UPDATE queue_message AS m
            SET state = 2, delivery_attempts = m.delivery_attempts + 1,
                receipt_handle = gen_random_uuid(),
                available_after = now() + make_interval(secs => p_visibility),
                last_delivered_at = now(),
                attempts = retsu_new_attempt(
                    m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer),
                wait_key = CASE WHEN m.group_key IS NULL THEN m.wait_key ELSE chosen.key END
            FROM chosen
            WHERE m.id = chosen.id
            RETURNING m.id, m.payload, m.priority, m.group_key, m.receipt_handle,
                      m.delivery_attempts, m.enqueued_at, m.enqueue_order, m.wait_key,
                      chosen.was, chosen.pos
        )
        SELECT * FROM claimed ORDER BY claimed.pos
    LOOP
"""

_LANES_CLAIMS = """\
        ), claimed AS (
            UPDATE queue_message AS m
            SET state = 2, delivery_attempts = m.delivery_attempts + 1,
                receipt_handle = gen_random_uuid(),
                available_after = now() + make_interval(secs => p_visibility),
                last_delivered_at = now(),
                attempts = retsu_new_attempt(
                    m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer),
                wait_key = CASE WHEN m.group_key IS NULL THEN m.wait_key
                                ELSE nextval('queue_message_enqueue_order_seq') END
            FROM walked AS w
            WHERE m.id = w.id AND w.reached AND w.allowed
"""
_LANES_CLAIMS_KEYED = """\
        ), keyed AS MATERIALIZED (
            -- The ones claimed, in delivery order, each grouped one's next wait key drawn
            -- in it: the lanes this claim served first wait first (migration 0018).
            SELECT w.id, w.state, w.k, CASE WHEN w.group_key IS NOT NULL
                        THEN nextval('queue_message_enqueue_order_seq') END AS key
            FROM (SELECT x.id, x.state, x.k, x.group_key FROM walked AS x
                  WHERE x.reached AND x.allowed
                  ORDER BY x.priority DESC, x.k, x.o) AS w
        ), claimed AS (
            UPDATE queue_message AS m
            SET state = 2, delivery_attempts = m.delivery_attempts + 1,
                receipt_handle = gen_random_uuid(),
                available_after = now() + make_interval(secs => p_visibility),
                last_delivered_at = now(),
                attempts = retsu_new_attempt(
                    m.attempts, m.available_after, m.delivery_attempts + 1, p_consumer),
                wait_key = CASE WHEN m.group_key IS NULL THEN m.wait_key ELSE w.key END
            FROM keyed AS w
            WHERE m.id = w.id
"""

EDITS: list[tuple[str, list[tuple[str, str]]]] = [
    (_DEQUEUE, [(_DEQUEUE_ANSWER, _DEQUEUE_ANSWER_ORDERED)]),
    (_FLOW, [(_FLOW_CLAIMS, _FLOW_CLAIMS_ORDERED)]),
    (_LANES, [(_LANES_CLAIMS, _LANES_CLAIMS_KEYED)]),
]


def upgrade() -> None:
    bind = op.get_bind()
    for function, edits in EDITS:
        definition = bind.execute(
            sa.text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"), {"f": function}
        ).scalar_one()
        for number, (old, new) in enumerate(edits, 1):
            found = definition.count(old)
            if found != 1:
                raise RuntimeError(
                    f"{function} holds {found} copies of migration 0018's fragment {number}, "
                    "not 1: edited by hand?"
                )
            definition = definition.replace(old, new)
        # exec_driver_sql: the text goes to PostgreSQL as it is (no bind parameters).
        bind.exec_driver_sql(definition)


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
