"""Costs of the fast paths that nothing needed (SPEC §7 "every hot-path query uses an
index", §7b): a walk of the whole primary key to promote candidates, an attempt-closing
function run through the SQL function executor on every claim, and a PL/pgSQL call on
every acknowledgement of a capped queue.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02

**1. Promotion by key.** The claim (``retsu_dequeue``'s fast path, migration 0005's statement
as 0009 left it) makes the candidates it does not deliver READY in its ``promoted`` step:
an UPDATE joined to the ``candidate`` CTE. The function's cached generic plan ran that join
as a merge join over ``queue_message_pkey`` read from its start — every message of every
queue, in id order, up to the last candidate's id. Ids are UUIDv7, so ended delays, the
newest messages, sit at the end: on a table of 200,000 messages one claim that promoted 49
ended delays touched 176,850 buffers and took 215 ms (1,517 buffers and 4.9 ms now, most of
them the 49 rows' own index entries). A claim that promoted nothing still paid the merge
join's first step, the walk from the oldest id to the first live one over the entries
acknowledged messages left behind (64–115 buffers a claim under steady dequeue + ack).
Now the update names its rows with ``m.id = ANY (ARRAY(…))``: an index condition, one
probe per candidate, none when nothing is promoted. The join to ``candidate`` stays, for
each row's former state.

**2. ``retsu_close_attempt`` is STABLE**, not IMMUTABLE: its body builds jsonb from a
timestamptz, which depends on the session's TimeZone (``jsonb_build_object`` is STABLE).
Declared IMMUTABLE, its body was more volatile than its declaration, so PostgreSQL never
inlined it: every claim ran it through the SQL function executor, which parses and plans
the body on each call (``fmgr_sql`` was 3.8 % of PostgreSQL's CPU under dequeue + ack).
Now it is inlined into the statements that call it, as ``retsu_new_attempt`` already was.
No index or stored value depends on it.

**3. A capped queue's acknowledgement asks ``queue_waiter`` itself** before it calls
``retsu_cap_wake`` (migration 0014): the call, a PL/pgSQL function whose first test is that
same probe, cost ~46 µs an acknowledgement though nearly always no long poll waits. The
function still decides when one does; what the acknowledgement answers is unchanged.
Measured with one connection per queue, a claim and an acknowledgement on a queue with a
never-reached ``max_in_flight`` and on one without, alternating message by message in one
table: the capped queue's extra cost went from 148–174 µs a message to 71–111 µs.

Measured on the SQL floor (``dequeue-ack-1`` with a 1,000-message backlog, 20 connections,
alternating with and without, docs/performance.md): PostgreSQL CPU a message −6 to −11 % for
1, and −2 to −18 % (median −8 %) for 2 on top of it.

Tried and left out: one walk of the ended leases for both ``exhausted`` and ``due_leases``
(they walk the same range of ``queue_message_lease_idx``; +25–35 % with a held transaction).
Under one LIMIT, more exhausted leases than a claim moves would hide a retry behind them,
which SPEC §3.3 forbids (the contract test "exhausted messages beyond the dead-letter batch
never hide a retry" caught it).

**Edited, not restated** (as migrations 0013–0015 do): ``retsu_dequeue`` and
``retsu_acknowledge`` are read back from the catalogue and exact fragments replaced; the
migration fails if a fragment is not there exactly once. Everything else in them (0014's
and 0015's edits) is kept.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


_PROMOTED_FROM = """\
            UPDATE queue_message AS m SET state = 1
            FROM candidate AS c
            WHERE m.id = c.id AND c.state <> 1
              AND m.id NOT IN (SELECT chosen.id FROM chosen)
"""
_PROMOTED_TO = """\
            -- (= ANY: one primary-key probe per candidate; the join alone was planned as a
            -- walk of the whole primary key, migration 0016)
            UPDATE queue_message AS m SET state = 1
            FROM candidate AS c
            WHERE m.id = ANY (ARRAY(SELECT x.id FROM candidate AS x WHERE x.state <> 1))
              AND m.id = c.id AND c.state <> 1
              AND m.id NOT IN (SELECT chosen.id FROM chosen)
"""
_I = " " * 53  # the fast path's wake test, as migration 0014 indented it
_WAKE_FROM = f"{_I}AND retsu_cap_wake(p_queue_id, v_cap);\n"
_WAKE_TO = f"""\
{_I}AND EXISTS (SELECT FROM queue_waiter AS w
{_I}            WHERE w.queue_id = p_queue_id)
{_I}AND retsu_cap_wake(p_queue_id, v_cap);
"""
# (function, [(fragment, replacement)]): each fragment exactly once.
EDITS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "retsu_dequeue(uuid, integer, integer, integer, text, text)",
        [(_PROMOTED_FROM, _PROMOTED_TO)],
    ),
    ("retsu_acknowledge(uuid, uuid[], uuid[], text[])", [(_WAKE_FROM, _WAKE_TO)]),
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
                    f"{function} holds {found} copies of migration 0016's fragment {number}, "
                    "not 1: edited by hand?"
                )
            definition = definition.replace(old, new)
        # exec_driver_sql: the text goes to PostgreSQL as it is (no bind parameters).
        bind.exec_driver_sql(definition)
    op.execute("ALTER FUNCTION retsu_close_attempt(jsonb, timestamptz, text) STABLE")


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
