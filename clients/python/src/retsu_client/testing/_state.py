"""The fake server's queues and messages: the rules of SPEC §3, in memory.

Every method takes the lock and reads the clock once, so one call is one consistent step
(like one transaction on the real server). Input has been validated by the HTTP layer
(``_http.py``) except what needs the stored state (queue existence, delay vs lifetime).
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from retsu_client.testing.clock import Clock

PRIORITIES = {"HIGH": 3, "MEDIUM": 2, "LOW": 1}
PRIORITY_NAMES = {value: name for name, value in PRIORITIES.items()}
IDEMPOTENCY_SECONDS = 24 * 3600
DEAD_LETTER_BATCH = 100  # dead-lettered per dequeue at most (the server moves in batches)
HEALTHY_SECONDS, STALE_SECONDS = 30, 300


class Problem(Exception):
    """An error answer: status, stable code, sentence."""

    def __init__(
        self, status: int, code: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail
        self.headers = headers or {}


def queue_not_found(queue_id: str) -> Problem:
    return Problem(404, "queue_not_found", f"Queue {queue_id} does not exist.")


class Ids:
    """UUIDv7 (time-ordered, RFC 9562): 48-bit milliseconds, then random bits; a counter
    in the random part keeps ids from one millisecond in creation order."""

    def __init__(self) -> None:
        self._last = 0
        self._counter = 0
        self._lock = threading.Lock()

    def new(self) -> str:
        with self._lock:
            millis = time.time_ns() // 1_000_000
            if millis <= self._last:
                millis = self._last
                self._counter += 1
            else:
                self._last, self._counter = millis, int.from_bytes(os.urandom(1)) & 0x3F
            rand_a = self._counter & 0xFFF
            rand_b = int.from_bytes(os.urandom(8)) & ((1 << 62) - 1)
            value = (millis << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
            return str(uuid.UUID(int=value))


@dataclass(eq=False)
class StoredMessage:
    id: str
    payload: str
    priority: int
    order: int
    enqueued_at: datetime
    expires_at: datetime
    available_at: datetime  # end of the delay before the first delivery, then lease end
    attempts: int = 0
    receipt: str | None = None
    last_delivered_at: datetime | None = None
    redriven_from: str | None = None

    def state(self, now: datetime, max_attempts: int) -> str | None:
        """ready / in_flight / delayed, or None (expired, or an exhausted elapsed lease)."""
        if self.receipt is not None and self.available_at > now:
            return "in_flight"
        if now >= self.expires_at:
            return None
        if self.receipt is None:
            return "delayed" if self.available_at > now else "ready"
        return "ready" if self.attempts < max_attempts else None

    def exhausted(self, now: datetime, max_attempts: int) -> bool:
        """An elapsed lease with no attempts left, still inside its lifetime."""
        return (
            self.receipt is not None
            and self.available_at <= now
            and self.attempts >= max_attempts
            and now < self.expires_at
        )

    def item(self, now: datetime, max_attempts: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "payload": self.payload,
            "priority": PRIORITY_NAMES[self.priority],
            "state": self.state(now, max_attempts),
            "delivery_attempts": self.attempts,
            "enqueued_at": self.enqueued_at,
            "expires_at": self.expires_at,
            "available_at": self.available_at,
            "last_delivered_at": self.last_delivered_at,
            "redriven_from": self.redriven_from,
        }


@dataclass(eq=False)
class DeadLetter:
    id: str
    payload: str
    priority: int
    order: int
    attempts: int
    enqueued_at: datetime
    last_delivered_at: datetime | None
    dead_lettered_at: datetime
    reason: str = "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"

    def item(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "payload": self.payload,
            "priority": PRIORITY_NAMES[self.priority],
            "delivery_attempts": self.attempts,
            "enqueued_at": self.enqueued_at,
            "last_delivered_at": self.last_delivered_at,
            "dead_lettered_at": self.dead_lettered_at,
            "reason": self.reason,
        }


@dataclass(eq=False)
class ConsumerSeen:
    name: str
    first_seen_at: datetime
    last_seen_at: datetime
    deliveries: int = 0


COUNTERS = ("enqueued", "delivered", "acknowledged", "dead_lettered", "expired")


@dataclass(eq=False)
class FakeQueue:
    id: str
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    created_at: datetime
    paused: bool = False
    messages: dict[str, StoredMessage] = field(default_factory=dict)
    dead_letters: dict[str, DeadLetter] = field(default_factory=dict)
    keys: dict[str, tuple[tuple[Any, ...], str, datetime]] = field(default_factory=dict)
    consumers: dict[str, ConsumerSeen] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    history: list[dict[str, Any]] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "visibility_timeout_seconds": self.visibility_timeout_seconds,
            "max_delivery_attempts": self.max_delivery_attempts,
            "default_message_ttl_seconds": self.default_message_ttl_seconds,
            "paused": self.paused,
        }

    def stats(self, now: datetime) -> dict[str, Any]:
        counts = {"ready": 0, "in_flight": 0, "delayed": 0}
        oldest: datetime | None = None
        for message in self.messages.values():
            state = message.state(now, self.max_delivery_attempts)
            if state is None:
                continue
            counts[state] += 1
            if state == "ready" and (oldest is None or message.enqueued_at < oldest):
                oldest = message.enqueued_at
        age = 0.0 if oldest is None else round((now - oldest).total_seconds(), 3)
        return {**counts, "dead_letters": len(self.dead_letters), "oldest_ready_age_seconds": age}


@dataclass(frozen=True)
class NewMessage:
    payload: str
    priority: int
    ttl_seconds: int | None
    delay_seconds: int | None

    def fingerprint(self) -> tuple[Any, ...]:
        # An absent delay equals 0; an absent ttl differs from an explicit one (SPEC §3.3).
        return (self.payload, self.priority, self.ttl_seconds, self.delay_seconds or 0)


@dataclass(frozen=True)
class Caller:
    actor: str
    request_id: str


# The most points one history answer holds (SPEC §3.8).
HISTORY_MAX_POINTS = 360


class State:
    """Every queue of one fake server."""

    def __init__(self, clock: Clock, history_interval_seconds: int) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.ids = Ids()
        self.queues: dict[str, FakeQueue] = {}
        self.audit: list[dict[str, Any]] = []
        self.history_interval = timedelta(seconds=history_interval_seconds)
        self._order = 0
        self._next_snapshot = clock.now() + self.history_interval

    # --- helpers ------------------------------------------------------------------------

    def _step(self) -> datetime:
        """The time of this step, after taking every history snapshot that is due."""
        now = self.clock.now()
        while self._next_snapshot <= now:
            self._snapshot(self._next_snapshot)
            self._next_snapshot += self.history_interval
        return now

    def _snapshot(self, at: datetime) -> None:
        for queue in self.queues.values():
            if queue.created_at > at:
                continue
            stats = queue.stats(at)
            point = {
                "at": at,
                "ready": stats["ready"],
                "in_flight": stats["in_flight"],
                "delayed": stats["delayed"],
                "dead_letters": stats["dead_letters"],
                **queue.counts,
            }
            queue.history.append(point)
            queue.counts = dict.fromkeys(COUNTERS, 0)
            horizon = at - timedelta(days=7)
            while queue.history and queue.history[0]["at"] < horizon:
                queue.history.pop(0)

    def _queue(self, queue_id: str) -> FakeQueue:
        queue = self.queues.get(queue_id)
        if queue is None:
            raise queue_not_found(queue_id)
        return queue

    def _next_order(self) -> int:
        self._order += 1
        return self._order

    def _audit(
        self,
        caller: Caller,
        now: datetime,
        action: str,
        target_type: str,
        target_id: str,
        queue_id: str,
        details: dict[str, Any],
    ) -> None:
        self.audit.append(
            {
                "id": self.ids.new(),
                "at": now,
                "actor": caller.actor,
                "action": action,
                "target_type": target_type,
                "target_id": target_id,
                "request_id": caller.request_id,
                "details": details,
                "_queue_id": queue_id,
                "_seq": len(self.audit),
            }
        )

    # --- queues -------------------------------------------------------------------------

    def create_queue(self, caller: Caller, name: str, settings: dict[str, int]) -> dict[str, Any]:
        with self.lock:
            now = self._step()
            if any(queue.name == name for queue in self.queues.values()):
                raise Problem(
                    409, "queue_already_exists", f"A queue named {name!r} already exists."
                )
            queue = FakeQueue(
                id=self.ids.new(),
                name=name,
                created_at=now,
                visibility_timeout_seconds=settings["visibility_timeout_seconds"],
                max_delivery_attempts=settings["max_delivery_attempts"],
                default_message_ttl_seconds=settings["default_message_ttl_seconds"],
            )
            self.queues[queue.id] = queue
            self._audit(
                caller,
                now,
                "queue.created",
                "queue",
                queue.id,
                queue.id,
                {"name": name, **settings},
            )
            return queue.view()

    def list_queues(self, name: str | None) -> list[dict[str, Any]]:
        with self.lock:
            self._step()
            queues = [q for q in self.queues.values() if name is None or q.name == name]
            return [q.view() for q in sorted(queues, key=lambda q: q.name.encode())]

    def get_queue(self, queue_id: str) -> dict[str, Any]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            return {**queue.view(), "stats": queue.stats(now)}

    def update_queue(
        self, caller: Caller, queue_id: str, changes: dict[str, int]
    ) -> dict[str, Any]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            for key, value in changes.items():
                setattr(queue, key, value)
            self._audit(
                caller, now, "queue.updated", "queue", queue.id, queue.id, {"changes": changes}
            )
            return queue.view()

    def set_paused(self, caller: Caller, queue_id: str, paused: bool) -> dict[str, Any]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            queue.paused = paused
            action = "queue.paused" if paused else "queue.resumed"
            self._audit(caller, now, action, "queue", queue.id, queue.id, {})
            return queue.view()

    def purge(self, caller: Caller, queue_id: str) -> int:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            purged = len(queue.messages)
            queue.messages.clear()
            self._audit(
                caller, now, "queue.purged", "queue", queue.id, queue.id, {"purged": purged}
            )
            return purged

    def delete_queue(self, caller: Caller, queue_id: str) -> None:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            del self.queues[queue_id]
            details = {
                "name": queue.name,
                "messages": len(queue.messages),
                "dead_letters": len(queue.dead_letters),
            }
            self._audit(caller, now, "queue.deleted", "queue", queue.id, queue.id, details)

    # --- messages -----------------------------------------------------------------------

    def _insert(
        self, queue: FakeQueue, message: NewMessage, now: datetime, redriven_from: str | None = None
    ) -> StoredMessage:
        ttl = message.ttl_seconds or queue.default_message_ttl_seconds
        stored = StoredMessage(
            id=self.ids.new(),
            payload=message.payload,
            priority=message.priority,
            order=self._next_order(),
            enqueued_at=now,
            expires_at=now + timedelta(seconds=ttl),
            available_at=now + timedelta(seconds=message.delay_seconds or 0),
            redriven_from=redriven_from,
        )
        queue.messages[stored.id] = stored
        queue.counts["enqueued"] += 1
        return stored

    @staticmethod
    def _check_delay(queue: FakeQueue, message: NewMessage, prefix: str = "") -> None:
        ttl = message.ttl_seconds or queue.default_message_ttl_seconds
        delay = message.delay_seconds or 0
        if delay >= ttl:
            raise Problem(
                400,
                "invalid_delay",
                f"{prefix}delay_seconds ({delay}) must be shorter than the message lifetime "
                f"({ttl} s).",
            )

    def enqueue(self, queue_id: str, message: NewMessage) -> str:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            self._check_delay(queue, message)
            return self._insert(queue, message, now).id

    def enqueue_batch(self, queue_id: str, messages: list[NewMessage]) -> list[str]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            for index, message in enumerate(messages):
                self._check_delay(queue, message, f"messages[{index}]: ")
            return [self._insert(queue, message, now).id for message in messages]

    def enqueue_idempotent(self, queue_id: str, message: NewMessage, key: str) -> tuple[str, bool]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            self._check_delay(queue, message)
            known = queue.keys.get(key)
            if known is not None and (now - known[2]).total_seconds() < IDEMPOTENCY_SECONDS:
                if known[0] != message.fingerprint():
                    raise Problem(
                        409,
                        "idempotency_key_conflict",
                        "This Idempotency-Key was already used for a different message in "
                        "this queue.",
                    )
                return known[1], True
            stored = self._insert(queue, message, now)
            queue.keys[key] = (message.fingerprint(), stored.id, now)
            return stored.id, False

    def dequeue(
        self,
        queue_id: str,
        max_messages: int,
        visibility_timeout_seconds: int | None,
        consumer: str | None,
        seen: bool,
    ) -> list[dict[str, Any]]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            delivered: list[dict[str, Any]] = []
            if not queue.paused:
                self._dead_letter(queue, now)
                lease = timedelta(
                    seconds=visibility_timeout_seconds or queue.visibility_timeout_seconds
                )
                ready = [
                    m
                    for m in queue.messages.values()
                    if m.state(now, queue.max_delivery_attempts) == "ready"
                ]
                ready.sort(key=lambda m: (-m.priority, m.order))
                for message in ready[:max_messages]:
                    message.attempts += 1
                    message.receipt = str(uuid.uuid4())
                    message.available_at = now + lease
                    message.last_delivered_at = now
                    queue.counts["delivered"] += 1
                    delivered.append(
                        {
                            "id": message.id,
                            "payload": message.payload,
                            "priority": PRIORITY_NAMES[message.priority],
                            "receipt_handle": message.receipt,
                            "delivery_attempts": message.attempts,
                            "enqueued_at": message.enqueued_at,
                        }
                    )
            if consumer is not None and (seen or delivered):
                record = queue.consumers.get(consumer)
                if record is None:
                    record = queue.consumers[consumer] = ConsumerSeen(consumer, now, now)
                record.last_seen_at = now
                record.deliveries += len(delivered)
            return delivered

    def _dead_letter(self, queue: FakeQueue, now: datetime) -> None:
        exhausted = [
            m for m in queue.messages.values() if m.exhausted(now, queue.max_delivery_attempts)
        ]
        exhausted.sort(key=lambda m: m.order)
        for message in exhausted[:DEAD_LETTER_BATCH]:
            del queue.messages[message.id]
            queue.dead_letters[message.id] = DeadLetter(
                id=message.id,
                payload=message.payload,
                priority=message.priority,
                order=message.order,
                attempts=message.attempts,
                enqueued_at=message.enqueued_at,
                last_delivered_at=message.last_delivered_at,
                dead_lettered_at=now,
            )
            queue.counts["dead_lettered"] += 1

    def _current(
        self, queue: FakeQueue, message_id: str, receipt: str, now: datetime
    ) -> StoredMessage | None:
        message = queue.messages.get(message_id)
        if message is None or message.receipt != receipt or message.available_at <= now:
            return None
        return message

    def acknowledge(self, queue_id: str, entries: Iterable[tuple[str, str]]) -> None:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            for message_id, receipt in entries:
                if self._current(queue, message_id, receipt, now) is not None:
                    del queue.messages[message_id]
                    queue.counts["acknowledged"] += 1

    def change_visibility(self, queue_id: str, message_id: str, receipt: str, seconds: int) -> None:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            message = self._current(queue, message_id, receipt, now)
            if message is None:
                raise Problem(
                    409,
                    "stale_receipt_handle",
                    "The receipt handle is not the message's current, unexpired delivery.",
                )
            message.available_at = now + timedelta(seconds=seconds)
            if seconds == 0:
                message.receipt = f"{message.receipt}-released"  # never acknowledges again

    def deliverable(self, queue_id: str) -> bool:
        """Whether a dequeue would find something now (for long polls)."""
        with self.lock:
            now = self.clock.now()
            queue = self.queues.get(queue_id)
            if queue is None or queue.paused:
                return queue is None
            return any(
                m.state(now, queue.max_delivery_attempts) == "ready"
                or m.exhausted(now, queue.max_delivery_attempts)
                for m in queue.messages.values()
            )

    # --- browsing -----------------------------------------------------------------------

    def browse(
        self, queue_id: str, state: str | None, priority: int | None
    ) -> tuple[list[dict[str, Any]], Callable[[dict[str, Any]], tuple[Any, ...]]]:
        """Every listed message in the state's order, and the sort key of an item."""
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            items = []
            for message in queue.messages.values():
                current = message.state(now, queue.max_delivery_attempts)
                if current is None or (state is not None and current != state):
                    continue
                if priority is not None and message.priority != priority:
                    continue
                item = message.item(now, queue.max_delivery_attempts)
                item["_key"] = _browse_key(state, message)
                items.append(item)
            items.sort(key=lambda item: item["_key"])
            return items, lambda item: tuple(item["_key"])

    def get_message(self, queue_id: str, message_id: str) -> dict[str, Any]:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            message = queue.messages.get(message_id)
            if message is None or message.state(now, queue.max_delivery_attempts) is None:
                raise _message_not_found(message_id)
            return message.item(now, queue.max_delivery_attempts)

    def delete_message(self, caller: Caller, queue_id: str, message_id: str) -> None:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            message = queue.messages.get(message_id)
            if message is None or message.state(now, queue.max_delivery_attempts) is None:
                raise _message_not_found(message_id)
            del queue.messages[message_id]
            self._audit(caller, now, "message.deleted", "message", message_id, queue.id, {})

    # --- dead letters -------------------------------------------------------------------

    def dead_letters(self, queue_id: str) -> list[DeadLetter]:
        """Newest first: by dead_lettered_at, then by reverse enqueue order."""
        with self.lock:
            self._step()
            queue = self._queue(queue_id)
            return sorted(
                queue.dead_letters.values(),
                key=lambda d: (d.dead_lettered_at, d.order),
                reverse=True,
            )

    def dead_letter(self, queue_id: str, message_id: str) -> DeadLetter:
        with self.lock:
            self._step()
            record = self._queue(queue_id).dead_letters.get(message_id)
            if record is None:
                raise _dead_letter_not_found(message_id)
            return record

    def _redrive(self, queue: FakeQueue, record: DeadLetter, now: datetime) -> str:
        del queue.dead_letters[record.id]
        message = NewMessage(record.payload, record.priority, None, None)
        return self._insert(queue, message, now, redriven_from=record.id).id

    def redrive(self, caller: Caller, queue_id: str, message_id: str) -> str:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            record = queue.dead_letters.get(message_id)
            if record is None:
                raise _dead_letter_not_found(message_id)
            new_id = self._redrive(queue, record, now)
            self._audit(
                caller,
                now,
                "dead_letter.redriven",
                "dead_letter",
                record.id,
                queue.id,
                {"new_message_id": new_id},
            )
            return new_id

    def redrive_many(self, caller: Caller, queue_id: str, limit: int) -> int:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            oldest_first = sorted(
                queue.dead_letters.values(), key=lambda d: (d.dead_lettered_at, d.order)
            )
            records = oldest_first[:limit]
            # The audit row names both ids of every record moved (SPEC §3.6).
            new_ids = {record.id: self._redrive(queue, record, now) for record in records}
            self._audit(
                caller,
                now,
                "dead_letter.redriven",
                "queue",
                queue.id,
                queue.id,
                {"limit": limit, "redriven": len(records), "new_message_ids": new_ids},
            )
            return len(records)

    def delete_dead_letter(self, caller: Caller, queue_id: str, message_id: str) -> None:
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            if queue.dead_letters.pop(message_id, None) is None:
                raise _dead_letter_not_found(message_id)
            self._audit(caller, now, "dead_letter.deleted", "dead_letter", message_id, queue.id, {})

    # --- audit, consumers, history, cleaning -------------------------------------------

    def audit_log(self, queue_id: str | None, action: str | None) -> list[dict[str, Any]]:
        with self.lock:
            self._step()
            entries = [
                entry
                for entry in self.audit
                if (queue_id is None or entry["_queue_id"] == queue_id)
                and (action is None or entry["action"] == action)
            ]
            return sorted(entries, key=lambda e: (e["at"], e["_seq"]), reverse=True)

    def consumers(self, queue_id: str | None, health: str | None) -> list[dict[str, Any]]:
        with self.lock:
            now = self._step()
            items = []
            for queue in self.queues.values():
                if queue_id is not None and queue.id != queue_id:
                    continue
                for seen in queue.consumers.values():
                    age = (now - seen.last_seen_at).total_seconds()
                    if age > 24 * 3600:
                        continue
                    state = (
                        "healthy"
                        if age <= HEALTHY_SECONDS
                        else "stale"
                        if age <= STALE_SECONDS
                        else "offline"
                    )
                    if health is not None and state != health:
                        continue
                    items.append(
                        {
                            "queue_id": queue.id,
                            "queue_name": queue.name,
                            "name": seen.name,
                            "first_seen_at": seen.first_seen_at,
                            "last_seen_at": seen.last_seen_at,
                            "deliveries": seen.deliveries,
                            "health": state,
                        }
                    )
            items.sort(key=lambda c: (-_timestamp(c["last_seen_at"]), c["queue_id"], c["name"]))
            return items

    def history(self, queue_id: str, minutes: int) -> tuple[int, list[dict[str, Any]]]:
        """The bucket width and the points, as the server answers (SPEC §3.8): snapshots
        summed into epoch-aligned buckets at least one snapshot interval wide and wide
        enough for at most 360 points; a point has its bucket's summed counts and the
        depth and time of its latest snapshot."""
        with self.lock:
            now = self._step()
            queue = self._queue(queue_id)
            width = max(
                math.ceil(self.history_interval.total_seconds()),
                math.ceil(minutes * 60 / HISTORY_MAX_POINTS),
                1,
            )
            since = now - timedelta(minutes=minutes)
            first = math.floor(since.timestamp() / width)
            if math.floor(now.timestamp() / width) - first + 1 > HISTORY_MAX_POINTS:
                # A window not aligned to its buckets touches one more than fits: the
                # oldest, partial one is left out.
                since = datetime.fromtimestamp((first + 1) * width, tz=since.tzinfo)
            points: list[dict[str, Any]] = []
            current: int | None = None
            for snapshot in queue.history:
                if snapshot["at"] < since:
                    continue
                bucket = math.floor(snapshot["at"].timestamp() / width)
                if points and bucket == current:
                    summed = {name: points[-1][name] + snapshot[name] for name in COUNTERS}
                    points[-1] = {**snapshot, **summed}
                else:
                    points.append(dict(snapshot))
                    current = bucket
            return width, points

    def clean_expired(self) -> int:
        """What the server's expired-message cleaner does: delete messages past their
        lifetime (an in-flight one only after its lease ends). Returns how many."""
        with self.lock:
            now = self._step()
            removed = 0
            for queue in self.queues.values():
                for message in list(queue.messages.values()):
                    if now >= message.expires_at and not (
                        message.receipt is not None and message.available_at > now
                    ):
                        del queue.messages[message.id]
                        queue.counts["expired"] += 1
                        removed += 1
            return removed

    def iter_messages(self, queue_id: str) -> Iterator[StoredMessage]:
        with self.lock:
            yield from list(self._queue(queue_id).messages.values())


def _timestamp(value: Any) -> float:
    assert isinstance(value, datetime)
    return value.timestamp()


def _browse_key(state: str | None, message: StoredMessage) -> list[Any]:
    if state == "ready":
        return [-message.priority, message.order]
    if state in ("in_flight", "delayed"):
        return [message.available_at.timestamp(), message.order]
    return [message.order]


def _message_not_found(message_id: str) -> Problem:
    return Problem(404, "message_not_found", f"Message {message_id} does not exist in this queue.")


def _dead_letter_not_found(message_id: str) -> Problem:
    return Problem(
        404, "dead_letter_not_found", f"Dead letter {message_id} does not exist in this queue."
    )
