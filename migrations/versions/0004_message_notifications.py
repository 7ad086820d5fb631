"""Long polling: NOTIFY retsu_messages, '<queue id>' when a queue is resumed, paused or deleted.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Every API process LISTENs on the channel ``retsu_messages`` (one dedicated connection
per process) and wakes the long polls waiting on the queue named in the payload.

Changes that make a *message* deliverable (an enqueue, a batch, a dead-letter redrive,
a lease released with visibility 0) are announced by the API process that made them,
right after its commit, in a separate notify-only transaction (batched, with
``synchronous_commit`` off) — not by a trigger. Measured: a NOTIFY inside the enqueue
transaction made PostgreSQL serialise every enqueue commit (NOTIFY takes a
database-wide lock that it holds until its transaction's commit is flushed), dropping
8-connection single-message enqueues from ~1,550 to ~230 per second
(docs/long-polling.md).

Changes to a *queue* are rare operator actions, so a trigger costs nothing that
matters here, and it announces them whoever makes them (an API process or `psql`):
``paused`` changing (a resume wakes the waiters; a pause makes them re-read the
queue) and a queue being deleted (its waiters answer 404 at once). Delivered at
commit, never for a rolled-back change.

Notifications are only hints; no correctness depends on them: waiters re-check every
second.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CHANNEL = "retsu_messages"


def upgrade() -> None:
    op.execute(
        f"""
        CREATE FUNCTION queue_notify_changed() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                PERFORM pg_notify('{CHANNEL}', OLD.id::text);
            ELSE
                PERFORM pg_notify('{CHANNEL}', NEW.id::text);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER queue_notify_paused AFTER UPDATE OF paused ON queue FOR EACH ROW "
        "WHEN (NEW.paused IS DISTINCT FROM OLD.paused) "
        "EXECUTE FUNCTION queue_notify_changed()"
    )
    op.execute(
        "CREATE TRIGGER queue_notify_deleted AFTER DELETE ON queue FOR EACH ROW "
        "EXECUTE FUNCTION queue_notify_changed()"
    )


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
