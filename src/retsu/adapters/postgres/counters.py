"""Keeping the state rollup exact: SQL pieces every statement that changes messages uses.

``queue_state_rollup`` holds, per queue, priority and shard (the last byte of the message
id, & 31), how many messages are physically READY, IN_FLIGHT and DELAYED and how many dead
letters there are, plus cumulative counts of what happened (enqueued, delivered,
acknowledged, dead-lettered, expired; SPEC §3.8). No trigger keeps it: each statement that
changes messages or dead letters counts what it changed, in the same statement, through
these pieces (the hot ones do it inside their functions, migration 0005). A counter can
never go negative: the table's CHECK fails the whole transaction instead. The integration
tests compare every counter with ``count(*)`` after each kind of change.

Rows of one statement's changes are summed per counter row first and applied in key order,
so concurrent statements lock counter rows in the same order.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from retsu.adapters.postgres.tables import MessageState

READY = int(MessageState.READY)
IN_FLIGHT = int(MessageState.IN_FLIGHT)
DELAYED = int(MessageState.DELAYED)
COMPLETED = int(MessageState.COMPLETED)
THROTTLED = int(MessageState.THROTTLED)
# The physical states each counter counts (migration 0009): a waiting or parked grouped
# message counts as ready, a waiting one whose delay runs as delayed.
COUNTED_READY = f"({READY}, {int(MessageState.WAITING)}, {int(MessageState.THROTTLED)})"
COUNTED_DELAYED = f"({DELAYED}, {int(MessageState.WAITING_DELAYED)})"


def uncount_messages(removed: str, *, name: str = "uncounted", expired: bool = False) -> str:
    """A CTE named ``name`` taking the messages in CTE ``removed`` (columns queue_id, id,
    priority, state) off the counters; ``expired`` also counts them as expired."""
    also = ", expired = c.expired + d.n" if expired else ""
    return f"""{name} AS (
        UPDATE queue_state_rollup AS c
        SET ready = c.ready - d.ready, in_flight = c.in_flight - d.in_flight,
            delayed = c.delayed - d.delayed, completed = c.completed - d.completed{also}
        FROM (
            SELECT r.queue_id, r.priority, retsu_shard(r.id) AS shard,
                   count(*) FILTER (WHERE r.state IN {COUNTED_READY}) AS ready,
                   count(*) FILTER (WHERE r.state = {IN_FLIGHT}) AS in_flight,
                   count(*) FILTER (WHERE r.state IN {COUNTED_DELAYED}) AS delayed,
                   count(*) FILTER (WHERE r.state = {COMPLETED}) AS completed,
                   count(*) AS n
            FROM {removed} AS r
            GROUP BY 1, 2, 3
            ORDER BY 1, 2, 3
        ) AS d
        WHERE c.queue_id = d.queue_id AND c.priority = d.priority AND c.shard = d.shard
        RETURNING 1
    )"""


def uncount_dead_letters(removed: str, *, name: str = "uncounted") -> str:
    """A CTE taking the dead letters in CTE ``removed`` (queue_id, id, priority) off the
    counters."""
    return f"""{name} AS (
        UPDATE queue_state_rollup AS c
        SET dead_letters = c.dead_letters - d.n
        FROM (
            SELECT r.queue_id, r.priority, retsu_shard(r.id) AS shard, count(*) AS n
            FROM {removed} AS r
            GROUP BY 1, 2, 3
            ORDER BY 1, 2, 3
        ) AS d
        WHERE c.queue_id = d.queue_id AND c.priority = d.priority AND c.shard = d.shard
        RETURNING 1
    )"""


def count_new_ready(stored: str, *, name: str = "counted") -> str:
    """A CTE counting the new READY messages in CTE ``stored`` (queue_id, id, priority) as
    ready and enqueued (a counter row is made when the shard has none yet)."""
    return f"""{name} AS (
        INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, enqueued)
        SELECT s.queue_id, s.priority, retsu_shard(s.id), count(*), count(*)
        FROM {stored} AS s
        GROUP BY 1, 2, 3
        ORDER BY 1, 2, 3
        ON CONFLICT (queue_id, priority, shard) DO UPDATE
        SET ready = c.ready + excluded.ready, enqueued = c.enqueued + excluded.enqueued
        RETURNING 1
    )"""


def count_stored(stored: str, *, name: str = "counted") -> str:
    """A CTE counting the new messages in CTE ``stored`` (queue_id, id, priority, state), in
    whatever physical state they were written, as enqueued (bulk loads: the benchmark's
    prefill, tests that write rows directly)."""
    return f"""{name} AS (
        INSERT INTO queue_state_rollup AS c
            (queue_id, priority, shard, ready, in_flight, delayed, enqueued)
        SELECT s.queue_id, s.priority, retsu_shard(s.id),
               count(*) FILTER (WHERE s.state = {READY}),
               count(*) FILTER (WHERE s.state = {IN_FLIGHT}),
               count(*) FILTER (WHERE s.state = {DELAYED}), count(*)
        FROM {stored} AS s
        GROUP BY 1, 2, 3
        ORDER BY 1, 2, 3
        ON CONFLICT (queue_id, priority, shard) DO UPDATE
        SET ready = c.ready + excluded.ready, in_flight = c.in_flight + excluded.in_flight,
            delayed = c.delayed + excluded.delayed, enqueued = c.enqueued + excluded.enqueued
        RETURNING 1
    )"""


# New READY messages, given as arrays of ids and priorities: ready and enqueued. A separate
# statement from the one that stored them when that statement also changed counter rows
# (a redrive takes its dead letters off first): one statement may change a counter row
# only once, and an upsert cannot carry the negative half of a combined change (the CHECK
# applies to the proposed row before the conflict turns it into an update).
COUNT_NEW_READY = """
    INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, enqueued)
    SELECT CAST(:queue_id AS uuid), n.priority, retsu_shard(n.id), count(*), count(*)
    FROM unnest(CAST(:ids AS uuid[]), CAST(:priorities AS smallint[])) AS n(id, priority)
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (queue_id, priority, shard) DO UPDATE
    SET ready = c.ready + excluded.ready, enqueued = c.enqueued + excluded.enqueued
"""


# Messages removed regardless of their state (purge, an operator's delete): the removing
# statement returns what it removed summed per counter row (``REMOVED_BY_COUNTER``), and
# this second statement of the same transaction takes it off the counters. Not one
# statement: such a DELETE finds a row claimed by a transaction that committed after the
# statement began in its new state (IN_FLIGHT), while that statement's own counter update
# would start from the counter row as of its beginning, which does not count the claim yet —
# and PostgreSQL checks the CHECK constraint against that first computed row before it
# notices the concurrent update, so a correct purge failed as "negative". A new statement
# sees the claim's commit. (Statements that remove rows of one state only re-check that
# state on the row they finally lock, so their own counter updates never meet this.)
REMOVED_BY_COUNTER = f"""
    SELECT r.priority, retsu_shard(r.id) AS shard,
           count(*) FILTER (WHERE r.state IN {COUNTED_READY}) AS ready,
           count(*) FILTER (WHERE r.state = {IN_FLIGHT}) AS in_flight,
           count(*) FILTER (WHERE r.state IN {COUNTED_DELAYED}) AS delayed,
           count(*) FILTER (WHERE r.state = {COMPLETED}) AS completed,
           array_agg(r.group_key) FILTER (
               WHERE r.group_key IS NOT NULL AND r.state <> {COMPLETED}) AS groups,
           array_agg(r.state) FILTER (
               WHERE r.group_key IS NOT NULL AND r.state <> {COMPLETED}) AS group_states
    FROM removed AS r
    GROUP BY 1, 2
"""
UNCOUNT_REMOVED = """
    UPDATE queue_state_rollup AS c
    SET ready = c.ready - d.ready, in_flight = c.in_flight - d.in_flight,
        delayed = c.delayed - d.delayed, completed = c.completed - d.completed
    FROM (
        SELECT * FROM unnest(
            CAST(:priorities AS smallint[]), CAST(:shards AS smallint[]),
            CAST(:ready AS bigint[]), CAST(:in_flight AS bigint[]), CAST(:delayed AS bigint[]),
            CAST(:completed AS bigint[])
        ) AS u(priority, shard, ready, in_flight, delayed, completed)
        ORDER BY 1, 2
    ) AS d
    WHERE c.queue_id = :queue_id AND c.priority = d.priority AND c.shard = d.shard
"""


def uncount_parameters(queue_id: object, rows: list[Any]) -> dict[str, object]:
    """``UNCOUNT_REMOVED``'s parameters from ``REMOVED_BY_COUNTER``'s rows."""
    return {
        "queue_id": queue_id,
        "priorities": [row.priority for row in rows],
        "shards": [row.shard for row in rows],
        "ready": [row.ready for row in rows],
        "in_flight": [row.in_flight for row in rows],
        "delayed": [row.delayed for row in rows],
        "completed": [row.completed for row in rows],
    }


# Lane changes of grouped messages that left their lanes (SPEC §3.10): one call of
# ``retsu_group_apply`` (migration 0009) promotes each lane's next message. In the same
# transaction as the removal, after it and before the counters (every writer's lock order).
GROUPS_LEFT = sa.text(
    "SELECT retsu_group_apply(CAST(:queue_id AS uuid), CAST(:groups AS text[]), "
    "CAST(:leased AS integer[]), CAST(:pending AS integer[]), CAST(:waiting AS integer[]), "
    "CAST(:waiting_delayed AS integer[]))"
)
_PENDING = (
    int(MessageState.READY),
    int(MessageState.DELAYED),
    int(MessageState.THROTTLED),
)


def groups_left_parameters(queue_id: object, rows: list[Any]) -> dict[str, object] | None:
    """``GROUPS_LEFT``'s parameters from ``REMOVED_BY_COUNTER``'s rows, or None when no
    grouped message was removed."""
    groups: list[str] = []
    states: list[int] = []
    for row in rows:
        groups += row.groups or []
        states += row.group_states or []
    if not groups:
        return None
    return {
        "queue_id": queue_id,
        "groups": groups,
        "leased": [-int(s == IN_FLIGHT) for s in states],
        "pending": [-int(s in _PENDING) for s in states],
        "waiting": [-int(s == int(MessageState.WAITING)) for s in states],
        "waiting_delayed": [-int(s == int(MessageState.WAITING_DELAYED)) for s in states],
    }
