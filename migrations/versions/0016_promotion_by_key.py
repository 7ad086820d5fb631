"""A claim that makes ended delays or ended leases READY finds them by primary key, not by a
walk of the whole primary key (SPEC §7 "every hot-path query uses an index").

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02

**Why.** The fast path's claim (``retsu_dequeue``, migration 0005's statement as 0009 left
it) makes the candidates it does not deliver READY in its ``promoted`` step: an UPDATE
joined to the ``candidate`` CTE. The function's cached generic plan runs that join as a
merge join over ``queue_message_pkey`` read from its start — every message of every queue,
in id order, until the last candidate's id. Ids are UUIDv7, so the candidates that ended a
delay, the newest messages, sit at the end: on a table of 200,000 messages one claim that
promoted 49 ended delays touched 176,850 buffers and took 215 ms (4.9 ms with this
change, 1,517 buffers, most of them the 49 rows' own index entries). A claim that promotes
nothing paid the merge join's first step: the walk from the oldest id to the first live
one, over the entries acknowledged messages left behind (64–115 buffers a claim under the
steady dequeue + ack load, out of a few hundred; the SQL floor's dequeue + ack-1 used
6–11 % less PostgreSQL CPU a message without it).

**Now.** The update names the rows it changes by ``m.id = ANY (ARRAY(…))``: an index
condition on the primary key, one probe per candidate (none when nothing is promoted). The
join to ``candidate`` stays for each row's former state. Nothing else changes: the same rows
are promoted, in the same statement, with the same locks.

**Edited, not restated** (as migrations 0013–0015 do): ``retsu_dequeue`` is read back from the
catalogue and the one exact fragment replaced; the migration fails if the fragment is not
there exactly once. Everything else in it (0014's and 0015's edits) is kept.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

FUNCTION = "retsu_dequeue(uuid, integer, integer, integer, text, text)"
OLD = """\
            UPDATE queue_message AS m SET state = 1
            FROM candidate AS c
            WHERE m.id = c.id AND c.state <> 1
              AND m.id NOT IN (SELECT chosen.id FROM chosen)
"""
NEW = """\
            -- (= ANY: one primary-key probe per candidate; the join alone was planned as a
            -- walk of the whole primary key, migration 0016)
            UPDATE queue_message AS m SET state = 1
            FROM candidate AS c
            WHERE m.id = ANY (ARRAY(SELECT x.id FROM candidate AS x WHERE x.state <> 1))
              AND m.id = c.id AND c.state <> 1
              AND m.id NOT IN (SELECT chosen.id FROM chosen)
"""


def upgrade() -> None:
    bind = op.get_bind()
    definition = bind.execute(
        sa.text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"), {"f": FUNCTION}
    ).scalar_one()
    found = definition.count(OLD)
    if found != 1:
        raise RuntimeError(
            f"{FUNCTION} holds {found} copies of the fragment migration 0016 replaces, "
            "not 1: edited by hand?"
        )
    # exec_driver_sql: the text goes to PostgreSQL as it is (no bind parameters).
    bind.exec_driver_sql(definition.replace(OLD, NEW))


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
