"""Database health (SPEC §10): what keeps vacuum from cleaning Retsu's tables.

A queue on PostgreSQL degrades when vacuum cannot keep up. The usual cause is something
holding back the *xmin horizon*: the oldest transaction id any snapshot may still need.
Row versions deleted or updated after it cannot be removed, so the message tables fill with
dead rows that every claim walks. Three kinds of thing hold it back:

* a session of this database in a transaction that has an xid or a snapshot (a forgotten
  ``BEGIN`` in a console, a long report, an idle-in-transaction pooler client), or a
  physical replication connection reporting its standby's queries (hot_standby_feedback);
* a prepared transaction (``PREPARE TRANSACTION`` never committed);
* a replication slot with an ``xmin`` (a standby that is gone, a slot nobody consumes).

Each is a ``HorizonHolder``. How long one has held the horizon is measured from when its
snapshot or xid was taken, as far as storage can tell: a session's transaction start
(``xact_start``; for a statement running without an xid, the statement's start, since a
read-committed transaction takes a new snapshot per statement); a prepared transaction's
``prepared`` time. Storage cannot tell it for a replication slot, a standby's feedback, a
session whose details the database role may not see, nor for a repeatable-read transaction
in its second statement; ``since_first_seen`` dates each holder no later than when the
reader first saw it hold the same xid.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

# The tables whose vacuum state is exported (``db_table_*{table}``): Retsu's own, by name,
# so the label values are bounded and never include a user's tables that share the database.
RETSU_TABLES: Final = (
    "queue",
    "queue_message",
    "queue_dead_letter_message",
    "queue_state_rollup",
    "idempotency_key",
    "audit_log",
    "server_secret",
    "queue_consumer",
    "queue_history",
    "queue_group",
    "queue_rate_bucket",
    "queue_schedule",
)

# The console warns once the horizon has been held this long (SPEC §10).
HORIZON_WARNING_SECONDS: Final = 300.0

# How many holders a read reports, oldest xmin first: the one that matters and a few behind
# it (a pooler can leave dozens of idle-in-transaction clients; the gauge needs one).
HOLDER_LIMIT: Final = 10


# Who holds which xid (kind, name, pid, xid): the same key on two reads is the same hold.
HolderKey = tuple[str, str, int | None, int]


class HolderKind(enum.StrEnum):
    SESSION = "session"
    PREPARED_TRANSACTION = "prepared_transaction"
    REPLICATION_SLOT = "replication_slot"


@dataclass(frozen=True, slots=True)
class HorizonHolder:
    """One thing holding back cleanup."""

    kind: HolderKind
    # A session's application_name (may be empty), a prepared transaction's gid, a slot's
    # name.
    name: str
    # pg_stat_activity's state ("idle in transaction", "active", …), "prepared", or a slot's
    # "active" / "inactive"; None when the database role may not see it.
    state: str | None
    # The transaction id it holds the horizon at (its xmin, else its own xid).
    xid: int
    # How many transactions ago that was (PostgreSQL's age(xid)).
    xid_age: int
    # Since when it has held it; None when storage cannot tell (see the module docstring).
    since: datetime | None
    pid: int | None = None

    def age_seconds(self, now: datetime) -> float | None:
        if self.since is None:
            return None
        return max((now - self.since).total_seconds(), 0.0)

    @property
    def key(self) -> HolderKey:
        return (self.kind.value, self.name, self.pid, self.xid)


@dataclass(frozen=True, slots=True)
class TableHealth:
    table: str
    dead_rows: int
    # When autovacuum last finished on it; None when never (since statistics began).
    last_autovacuum: datetime | None

    def last_autovacuum_age_seconds(self, now: datetime) -> float:
        """+inf when autovacuum never processed the table."""
        if self.last_autovacuum is None:
            return math.inf
        return max((now - self.last_autovacuum).total_seconds(), 0.0)


@dataclass(frozen=True, slots=True)
class DatabaseHealth:
    """One read of the database's vacuum-related state, at ``taken_at`` (storage's clock)."""

    taken_at: datetime
    # Start of the oldest open transaction of this database (a session's, or a prepared
    # one); None when there is none.
    oldest_transaction_start: datetime | None
    # Oldest xmin first (the horizon itself first); at most HOLDER_LIMIT.
    holders: tuple[HorizonHolder, ...]
    # One per Retsu table that exists, in RETSU_TABLES order.
    tables: tuple[TableHealth, ...]

    @property
    def oldest_transaction_age_seconds(self) -> float:
        if self.oldest_transaction_start is None:
            return 0.0
        return max((self.taken_at - self.oldest_transaction_start).total_seconds(), 0.0)

    def longest_holder(self) -> HorizonHolder | None:
        """The holder that has held the horizon longest (of those whose start is known)."""
        known = [h for h in self.holders if h.since is not None]
        return min(known, key=lambda h: h.since or self.taken_at, default=None)

    @property
    def xmin_horizon_age_seconds(self) -> float:
        """How long the oldest snapshot holding back cleanup has been held; 0 when nothing
        holds the horizon back."""
        holder = self.longest_holder()
        age = holder.age_seconds(self.taken_at) if holder is not None else None
        return age or 0.0

    def blocking(self, threshold_seconds: float = HORIZON_WARNING_SECONDS) -> HorizonHolder | None:
        """The holder to name in a warning: the longest one, once it has held the horizon
        for more than ``threshold_seconds``."""
        holder = self.longest_holder()
        if holder is None or self.xmin_horizon_age_seconds <= threshold_seconds:
            return None
        return holder


def since_first_seen(
    health: DatabaseHealth, first_seen: Mapping[HolderKey, datetime]
) -> tuple[DatabaseHealth, dict[HolderKey, datetime]]:
    """``health`` with each holder dated no later than when it was first seen holding the
    same xid (``first_seen``, from earlier reads; a holder storage could not date is dated
    from there), and the sightings to keep for the next read. A holder that moved its xid
    (a standby's feedback, a new statement's snapshot) starts again; one that is gone is
    forgotten."""
    seen: dict[HolderKey, datetime] = {}
    holders = []
    for holder in health.holders:
        sighted = first_seen.get(holder.key, health.taken_at)
        seen[holder.key] = sighted
        if holder.since is None or sighted < holder.since:
            holder = dataclasses.replace(holder, since=sighted)
        holders.append(holder)
    return dataclasses.replace(health, holders=tuple(holders)), seen
