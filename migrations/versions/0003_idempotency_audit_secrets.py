"""Idempotency keys, the audit log, and server secrets.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per (queue, Idempotency-Key), remembered for 24 h; the expired-message
    # cleaner removes older rows. The fingerprint is a hash of the parsed message, so
    # a repeat with a different message is recognised as a conflict.
    op.execute(
        """
        CREATE TABLE idempotency_key (
            queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
            key text NOT NULL CONSTRAINT idempotency_key_length
                CHECK (length(key) BETWEEN 1 AND 128),
            message_id uuid NOT NULL,
            fingerprint bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (queue_id, key)
        )
        """
    )
    op.execute("CREATE INDEX idempotency_key_created_idx ON idempotency_key (created_at)")

    # Operator actions. No foreign key to queue: the trail outlives a deleted queue.
    op.execute(
        """
        CREATE TABLE audit_log (
            id uuid PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            actor text NOT NULL,
            action text NOT NULL,
            target_type text NOT NULL,
            target_id text NOT NULL,
            queue_id uuid,
            request_id text,
            details jsonb NOT NULL DEFAULT '{}'::jsonb
        )
        """
    )
    op.execute("CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC)")
    op.execute("CREATE INDEX audit_log_queue_idx ON audit_log (queue_id, at DESC, id DESC)")
    op.execute("CREATE INDEX audit_log_action_idx ON audit_log (action, at DESC, id DESC)")

    # Secrets every API process must share, made once by `retsu migrate`: the key
    # that signs pagination cursors (256 random bits from two v4 UUIDs' random parts).
    op.execute(
        """
        CREATE TABLE server_secret (
            name text PRIMARY KEY,
            value bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        """
        INSERT INTO server_secret (name, value)
        VALUES ('cursor_signing_key',
                uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()))
        """
    )


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
