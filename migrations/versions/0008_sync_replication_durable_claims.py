"""Claims, acknowledgements and visibility changes wait for a synchronous standby when
the database has one.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07

Migration 0005's ``retsu_dequeue``, ``retsu_acknowledge`` and ``retsu_change_visibility``
commit with ``synchronous_commit`` off: a claim or an acknowledgement lost in a crash is
a redelivery, which at-least-once delivery allows, and not waiting for the WAL flush was
worth 10-30 % of dequeue + ack throughput (docs/performance.md). With synchronous
replication that is no longer true (SPEC §10: no acknowledge answered 204 may be lost or
undone by a failover): the commit record of an acknowledgement, or of the claim it
acknowledges, could still be in the old primary's WAL buffers when its machine is lost,
and the promoted standby delivers the message again. Measured in
tests/integration/test_failover.py (every process of the primary SIGKILLed under load,
the synchronous standby promoted): 1 acknowledgement answered 204 undone in each of two
runs before this migration, none after.

So the three functions now leave ``synchronous_commit`` as the database's configuration
sets it whenever ``synchronous_standby_names`` is set (the operator asked commits to wait
for a standby), and turn it off, as before, only when it is empty. One helper,
``retsu_relax_commit()``, holds that rule; the functions call it where they set the
setting themselves. Their bodies are otherwise unchanged: each definition is taken from
the catalog and recreated with that one statement replaced.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

RELAX_COMMIT = """
CREATE FUNCTION retsu_relax_commit() RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF current_setting('synchronous_standby_names') = '' THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
END
$$;
"""

RELAXED = "PERFORM set_config('synchronous_commit', 'off', true);"
DEFERRED = "PERFORM retsu_relax_commit();"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


REDEFINE = f"""
DO $do$
DECLARE
    definition text;
    changed integer := 0;
BEGIN
    FOR definition IN
        SELECT pg_get_functiondef(p.oid) FROM pg_proc AS p
        WHERE p.proname IN ('retsu_dequeue', 'retsu_acknowledge', 'retsu_change_visibility')
          AND p.pronamespace = current_schema()::regnamespace
    LOOP
        IF position({_literal(RELAXED)} IN definition) = 0 THEN
            RAISE EXCEPTION 'a hot function does not set synchronous_commit as 0005 did';
        END IF;
        EXECUTE replace(definition, {_literal(RELAXED)}, {_literal(DEFERRED)});
        changed := changed + 1;
    END LOOP;
    IF changed <> 3 THEN
        RAISE EXCEPTION 'expected the 3 hot functions of migration 0005, found %', changed;
    END IF;
END
$do$;
"""


def upgrade() -> None:
    op.execute(RELAX_COMMIT)
    op.execute(REDEFINE)


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
