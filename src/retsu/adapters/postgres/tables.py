"""SQLAlchemy Core table definitions, mirroring the Alembic migrations.

The migrations are the source of truth for DDL (CHECK constraints, partial
indexes); these objects exist so queries are built with Core, not strings.
"""

from __future__ import annotations

import enum

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

metadata = sa.MetaData()


class MessageState(enum.IntEnum):
    """Physical state. An elapsed lease stays IN_FLIGHT and is *logically* ready."""

    READY = 1
    IN_FLIGHT = 2
    DELAYED = 3  # never delivered, inside its delay (migration 0005)
    WAITING = 4  # grouped, behind its group's head (migration 0009)
    WAITING_DELAYED = 5  # the same, its own delay still running
    COMPLETED = 6  # acknowledged and kept (SPEC §3.11)
    THROTTLED = 7  # a group's head parked until its group's next token


queue = sa.Table(
    "queue",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column("name", sa.Text(collation="C"), nullable=False, unique=True),
    sa.Column("visibility_timeout_seconds", sa.Integer, nullable=False),
    sa.Column("max_delivery_attempts", sa.Integer, nullable=False),
    sa.Column("default_message_ttl_seconds", sa.Integer, nullable=False),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("group_max_in_flight", sa.Integer, nullable=False),
    sa.Column("max_in_flight", sa.Integer),
    sa.Column("rate_per_second", sa.Double),
    sa.Column("rate_burst", sa.Integer),
    sa.Column("group_rate_per_second", sa.Double),
    sa.Column("group_rate_burst", sa.Integer),
    sa.Column("completed_retention_seconds", sa.Integer, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

queue_message = sa.Table(
    "queue_message",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column("queue_id", pg.UUID(as_uuid=True), sa.ForeignKey("queue.id"), nullable=False),
    sa.Column("enqueue_order", sa.BigInteger, sa.Identity(always=True), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False),
    sa.Column("state", sa.SmallInteger, nullable=False),
    sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("available_after", sa.DateTime(timezone=True), nullable=False),
    sa.Column("delivery_attempts", sa.Integer, nullable=False),
    sa.Column("receipt_handle", pg.UUID(as_uuid=True)),
    sa.Column("last_delivered_at", sa.DateTime(timezone=True)),
    sa.Column("redriven_from", pg.UUID(as_uuid=True)),
    sa.Column("group_key", sa.Text),
    sa.Column("schedule_id", pg.UUID(as_uuid=True)),
    sa.Column("wait_key", sa.BigInteger),
    sa.Column("attempts", pg.JSONB),
    sa.Column("completed_at", sa.DateTime(timezone=True)),
    sa.Column("result", sa.Text),
)

queue_dead_letter_message = sa.Table(
    "queue_dead_letter_message",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column("queue_id", pg.UUID(as_uuid=True), sa.ForeignKey("queue.id"), nullable=False),
    sa.Column("enqueue_order", sa.BigInteger, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False),
    sa.Column("delivery_attempts", sa.Integer, nullable=False),
    sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_delivered_at", sa.DateTime(timezone=True)),
    sa.Column("dead_lettered_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("group_key", sa.Text),
    sa.Column("attempts", pg.JSONB),
    sa.Column("last_error", sa.Text),
)

idempotency_key = sa.Table(
    "idempotency_key",
    metadata,
    sa.Column("queue_id", pg.UUID(as_uuid=True), sa.ForeignKey("queue.id"), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("message_id", pg.UUID(as_uuid=True), nullable=False),
    sa.Column("fingerprint", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("target_type", sa.Text, nullable=False),
    sa.Column("target_id", sa.Text, nullable=False),
    sa.Column("queue_id", pg.UUID(as_uuid=True)),
    sa.Column("request_id", sa.Text),
    sa.Column("details", pg.JSONB, nullable=False),
)

server_secret = sa.Table(
    "server_secret",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

queue_schedule = sa.Table(
    "queue_schedule",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=True), primary_key=True),
    sa.Column(
        "queue_id",
        pg.UUID(as_uuid=True),
        sa.ForeignKey("queue.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("name", sa.Text(collation="C"), nullable=False),
    sa.Column("cron", sa.Text),
    sa.Column("every_seconds", sa.Integer),
    sa.Column("timezone", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False),
    sa.Column("ttl_seconds", sa.Integer),
    sa.Column("group_key", sa.Text),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("next_run_at", sa.DateTime(timezone=True)),
    sa.Column("last_run_at", sa.DateTime(timezone=True)),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
