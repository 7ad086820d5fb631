"""The SQL interface notifies only when someone waits: ``queue_waiter``, and
``retsu.enqueue`` / ``retsu.acknowledge`` sending their ``pg_notify`` only for a queue that
an API process has a long poll waiting on. And ``retsu_uuid7`` in PL/pgSQL.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-10

**Why.** Migration 0012's functions ``pg_notify`` inside the caller's transaction, and
PostgreSQL serialises the commits of notifying transactions on its notify lock (migration
0004, docs/long-polling.md): measured, ``retsu.enqueue`` ran at 0.18–0.24× of Retsu's SQL
floor enqueue, and at 0.91–1.4× with the notify taken out (docs/performance.md, "SQL
interface: retsu.enqueue"). A notification nobody is waiting for buys nothing, so it is
now sent only when an API process has registered a waiting long poll on the queue.

**``queue_waiter``** — one row per (queue, API process) while that process has long polls
waiting on the queue: written by the process's LISTEN connection only
(``adapters/postgres/notifications.py``): inserted when the first poll of the queue starts
to wait (not for polls a claim answers at once), ``seen_at`` refreshed every 10 s while
any waits, deleted a few seconds after the last one ended (so a busy consumer loop does
not churn rows), all in one statement per change, batched, never per dequeue. UNLOGGED:
it describes live sessions, so losing it in a crash costs nothing (every API process
reconnects its LISTEN session then, and registers again before it listens). Rows go with
their queue (cascade).

**The check** (``retsu_wake``): a notification is sent when a row of the queue has
``seen_at`` within the last ``WAITER_FRESH_SECONDS`` (three refreshes: a crashed process's
rows stop counting then, having cost only notifications nobody heard; the API processes
delete them later). ``now()`` is the caller's transaction start, so a long transaction
reads the window as of its start — wider, never narrower.

**Why nothing is lost.** A waiter's process commits its row before the waiter claims
again (the LISTEN connection signals the queue's waiters after the row is committed, so
they claim once more at once). An enqueue whose check ran before that commit, and which
itself commits after that claim's snapshot, is not announced: the waiter finds it at its
periodic re-check (at most 1 s later; every waiter re-checks at least once a second,
docs/long-polling.md), as it finds a message inserted with ``psql``. Every other enqueue
is either seen by that claim or announced at its commit. A caller in REPEATABLE READ
checks with its transaction's snapshot, so a row committed after that snapshot counts as
absent: the same ≤ 1 s.

**``retsu_uuid7`` in PL/pgSQL**, the same expression: as a SQL function with a ``FROM``
it cannot be inlined, and PostgreSQL (before 18) plans such a function's query again at
every call; PL/pgSQL keeps its expressions' plans for the session. Measured with pgbench
(one client, ``synchronous_commit`` off, runs of 3 s interleaved, medians of 6): one
``retsu.enqueue`` took 0.50 ms with 0012's function and 0.33 ms with this one, the
floor's statement 0.25 ms.

**The functions are edited, not restated.** Migration 0012's definitions are read back
from the catalogue (``pg_get_functiondef``) and each ``pg_notify`` call replaced by a call
of ``retsu_wake``; the migration fails if it does not find exactly the calls 0012 wrote.
``CREATE OR REPLACE`` keeps the owner, the grants, ``SECURITY DEFINER`` and the pinned
``search_path``. ``retsu_wake`` lives in Retsu's table schema with its names
schema-qualified, and ``EXECUTE`` on it is revoked from ``PUBLIC``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

CHANNEL = "retsu_messages"
# A registration younger than this counts; the API processes refresh theirs every 10 s
# (notifications.WAITER_REFRESH_SECONDS, held below this by the tests).
WAITER_FRESH_SECONDS = 30
ENQUEUE = "retsu.enqueue(text, text, text, integer, integer, text, text)"
ACKNOWLEDGE = "retsu.acknowledge(text, uuid, text, text)"
# The calls migration 0012 wrote (``\\:`` is a colon: op.execute takes ``:name`` as a
# parameter), and how many each function holds.
NOTIFY_CALL = f"PERFORM pg_catalog.pg_notify('{CHANNEL}', v_queue_id::text || '\\:messages');"
NOTIFY_CALLS = {ENQUEUE: 2, ACKNOWLEDGE: 1}
NOTIFY_CALL_LENGTH = len(NOTIFY_CALL.replace("\\:", ":"))  # as PostgreSQL stores it


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    schema = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    s = _identifier(schema)
    op.execute(f"""
CREATE UNLOGGED TABLE {s}.queue_waiter (
    queue_id uuid NOT NULL REFERENCES {s}.queue (id) ON DELETE CASCADE,
    process text NOT NULL,
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, process)
) WITH (fillfactor = 50)
""")
    op.execute(
        f"COMMENT ON TABLE {s}.queue_waiter IS 'API processes with long polls waiting on a "
        "queue: retsu.enqueue and retsu.acknowledge notify only these queues (migration 0013)'"
    )
    op.execute(f"""
CREATE FUNCTION {s}.retsu_wake(p_queue_id uuid) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF EXISTS (
        SELECT FROM {s}.queue_waiter AS w
        WHERE w.queue_id = p_queue_id
          AND w.seen_at > pg_catalog.now()
                          - pg_catalog.make_interval(secs => {WAITER_FRESH_SECONDS}))
    THEN
        PERFORM pg_catalog.pg_notify('{CHANNEL}', p_queue_id::text || '\\:messages');
    END IF;
END
$$
""")
    op.execute(f"REVOKE ALL ON FUNCTION {s}.retsu_wake(uuid) FROM PUBLIC")
    # Migration 0012's UUIDv7 (see there), unchanged but for the language.
    op.execute(f"""
CREATE OR REPLACE FUNCTION {s}.retsu_uuid7() RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    u bytea := pg_catalog.set_bit(pg_catalog.set_bit(
        overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
                PLACING substring(pg_catalog.int8send(pg_catalog.floor(
                    extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
        52, 1), 53, 1);
BEGIN
    RETURN pg_catalog.encode(pg_catalog.set_byte(u, 15,
               (pg_catalog.get_byte(u, 15) & 224)
               | (pg_catalog.txid_current() % 32)::integer), 'hex')::uuid;
END
$$
""")
    wake = f"PERFORM {s}.retsu_wake(v_queue_id);"
    for function, calls in NOTIFY_CALLS.items():
        op.execute(f"""
DO $do$
DECLARE
    v_definition text := pg_catalog.pg_get_functiondef('{function}'::pg_catalog.regprocedure);
    v_found integer;
BEGIN
    v_found := (pg_catalog.length(v_definition) - pg_catalog.length(
        pg_catalog.replace(v_definition, $n${NOTIFY_CALL}$n$, ''))) / {NOTIFY_CALL_LENGTH};
    IF v_found <> {calls} THEN
        RAISE EXCEPTION '{function} holds % pg_notify calls, not {calls} as migration 0012 '
            'wrote them: edited by hand?', v_found;
    END IF;
    EXECUTE pg_catalog.replace(v_definition, $n${NOTIFY_CALL}$n$, $w${wake}$w$);
END
$do$
""")


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
