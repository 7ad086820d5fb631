"""Queues, messages and dead letters.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE queue (
            id uuid PRIMARY KEY,
            name text COLLATE "C" NOT NULL,
            visibility_timeout_seconds integer NOT NULL
                CONSTRAINT queue_visibility_timeout_range
                CHECK (visibility_timeout_seconds BETWEEN 1 AND 21600),
            max_delivery_attempts integer NOT NULL
                CONSTRAINT queue_max_delivery_attempts_range
                CHECK (max_delivery_attempts BETWEEN 1 AND 100),
            default_message_ttl_seconds integer NOT NULL
                CONSTRAINT queue_default_message_ttl_range
                CHECK (default_message_ttl_seconds BETWEEN 1 AND 2592000),
            paused boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT queue_name_key UNIQUE (name),
            CONSTRAINT queue_name_format
                CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$')
        )
        """
    )
    # Rows are short-lived and updated in place (claim, requeue); leave room on each
    # page and vacuum early so dead tuples at the head of the claim index stay few.
    op.execute(
        """
        CREATE TABLE queue_message (
            id uuid PRIMARY KEY,
            queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
            enqueue_order bigint GENERATED ALWAYS AS IDENTITY,
            payload text NOT NULL,
            priority smallint NOT NULL CONSTRAINT queue_message_priority_range
                CHECK (priority BETWEEN 1 AND 3),
            state smallint NOT NULL CONSTRAINT queue_message_state_known
                CHECK (state IN (1, 2)),
            enqueued_at timestamptz NOT NULL,
            expires_at timestamptz NOT NULL,
            available_after timestamptz NOT NULL,
            delivery_attempts integer NOT NULL DEFAULT 0
                CONSTRAINT queue_message_attempts_non_negative CHECK (delivery_attempts >= 0),
            receipt_handle uuid,
            last_delivered_at timestamptz,
            CONSTRAINT queue_message_in_flight_has_handle
                CHECK (state = 1 OR receipt_handle IS NOT NULL),
            CONSTRAINT queue_message_expiry_after_enqueue CHECK (expires_at > enqueued_at)
        ) WITH (
            fillfactor = 80,
            autovacuum_vacuum_scale_factor = 0.01,
            autovacuum_vacuum_threshold = 500,
            autovacuum_vacuum_insert_scale_factor = 0.05,
            autovacuum_analyze_scale_factor = 0.02
        )
        """
    )
    # Delivery order within one queue and state: the claim walks the READY part
    # (highest priority, then FIFO) and stops at the first unlocked deliverable row;
    # the state reader walks the IN_FLIGHT part for the oldest in-flight message.
    op.execute(
        "CREATE INDEX queue_message_order_idx ON queue_message "
        "(queue_id, state, priority DESC, enqueue_order)"
    )
    # Elapsed leases (retries and dead-lettering at dequeue time): in-flight rows of
    # one queue by lease end, so `available_after <= now()` is a short range scan.
    op.execute(
        "CREATE INDEX queue_message_lease_idx ON queue_message "
        "(queue_id, available_after, enqueue_order) WHERE state = 2"
    )
    # Messages enqueued with a delay that have never been claimed; the state reader
    # counts the ones still waiting without touching the rest of the backlog.
    op.execute(
        "CREATE INDEX queue_message_delayed_idx ON queue_message "
        "(queue_id, available_after) "
        "WHERE state = 1 AND delivery_attempts = 0 AND available_after > enqueued_at"
    )
    # The expired-message cleaner walks this in order.
    op.execute("CREATE INDEX queue_message_expiry_idx ON queue_message (expires_at)")

    op.execute(
        """
        CREATE TABLE queue_dead_letter_message (
            id uuid PRIMARY KEY,
            queue_id uuid NOT NULL REFERENCES queue (id) ON DELETE CASCADE,
            enqueue_order bigint NOT NULL,
            payload text NOT NULL,
            priority smallint NOT NULL CONSTRAINT queue_dead_letter_priority_range
                CHECK (priority BETWEEN 1 AND 3),
            delivery_attempts integer NOT NULL
                CONSTRAINT queue_dead_letter_attempts_non_negative
                CHECK (delivery_attempts >= 0),
            enqueued_at timestamptz NOT NULL,
            last_delivered_at timestamptz,
            dead_lettered_at timestamptz NOT NULL,
            reason text NOT NULL
        )
        """
    )
    # Browsing (newest first) and bulk redrive (oldest first) of one queue.
    op.execute(
        "CREATE INDEX queue_dead_letter_browse_idx ON queue_dead_letter_message "
        "(queue_id, dead_lettered_at, enqueue_order)"
    )
    # The dead-letter cleaner's retention walk.
    op.execute(
        "CREATE INDEX queue_dead_letter_retention_idx ON queue_dead_letter_message "
        "(dead_lettered_at)"
    )


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
