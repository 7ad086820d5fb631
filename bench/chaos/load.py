"""Producers and consumers over HTTP, and the ledger that accounts for every message.

Producers enqueue numbered payloads (``chaos:<n>``), each with ``Idempotency-Key:
chaos-<n>``, and retry the same number until the API acknowledges it (201, or 200 for
a replay), so a retried enqueue can never be stored twice and the set of acknowledged
numbers is exact. Consumers dequeue in batches (long poll), record every delivery,
and acknowledge in one batch call; an acknowledgement answered 204 is *confirmed*.

The ledger then answers the questions of the run: which acknowledged enqueues were
never delivered (lost), which numbers were stored under two message ids, and which
messages were delivered again by a dequeue that started after their acknowledgement
was confirmed (an acknowledgement sent while its lease was still running, so the 204
was not one of the idempotent answers to a stale handle).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

PRIORITIES = ("HIGH", "MEDIUM", "LOW")
PAYLOAD_PREFIX = "chaos:"
# A 204 to an acknowledgement sent later than this before the lease ends might be the
# idempotent answer to an elapsed lease: such a message may legitimately come back.
LEASE_MARGIN_SECONDS = 2.0


@dataclass(frozen=True)
class Outcome:
    at: float  # seconds since the load started
    op: str  # enqueue, dequeue, acknowledge
    api: str
    ok: bool
    kind: str | None = None  # "503 database_unavailable", "ConnectError", ...


@dataclass
class Delivery:
    message_id: str
    number: int | None
    attempts: int
    requested_at: float  # monotonic, when the dequeue request was sent
    received_at: float  # monotonic, when its answer arrived
    receipt_handle: str = ""


@dataclass
class Confirmation:
    delivery: Delivery
    sent_at: float
    confirmed_at: float


@dataclass
class Ledger:
    visibility_timeout: float
    started: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)
    acknowledged_enqueues: dict[int, str] = field(default_factory=dict)  # n -> message id
    replays: int = 0
    given_up: set[int] = field(default_factory=set)
    stored_twice: list[tuple[int, str, str]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    ids_by_number: dict[int, set[str]] = field(default_factory=dict)
    confirmed: dict[str, Confirmation] = field(default_factory=dict)
    delivered_after_ack: list[tuple[str, int | None]] = field(default_factory=list)
    foreign_payloads: int = 0

    def now(self) -> float:
        return time.monotonic() - self.started

    def record(self, op: str, api: str, ok: bool, kind: str | None = None) -> None:
        self.outcomes.append(Outcome(self.now(), op, api, ok, kind))

    def enqueue_acknowledged(self, number: int, message_id: str, replayed: bool) -> None:
        self.replays += replayed
        known = self.acknowledged_enqueues.setdefault(number, message_id)
        if known != message_id:
            self.stored_twice.append((number, known, message_id))

    def delivered(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        if delivery.number is None:
            self.foreign_payloads += 1
        else:
            ids = self.ids_by_number.setdefault(delivery.number, set())
            if ids and delivery.message_id not in ids:
                self.stored_twice.append((delivery.number, min(ids), delivery.message_id))
            ids.add(delivery.message_id)
        earlier = self.confirmed.get(delivery.message_id)
        if (
            earlier is not None
            and delivery.requested_at > earlier.confirmed_at
            and earlier.sent_at
            < earlier.delivery.received_at + self.visibility_timeout - LEASE_MARGIN_SECONDS
        ):
            self.delivered_after_ack.append((delivery.message_id, delivery.number))

    def acknowledgement_confirmed(self, delivery: Delivery, sent_at: float) -> None:
        self.confirmed[delivery.message_id] = Confirmation(delivery, sent_at, time.monotonic())

    # -- the answers -------------------------------------------------------------------

    def delivered_numbers(self) -> set[int]:
        return set(self.ids_by_number)

    def lost(self) -> list[int]:
        return sorted(set(self.acknowledged_enqueues) - self.delivered_numbers())

    def redelivered_before_ack(self) -> int:
        """Deliveries beyond the first of a message (allowed: its ack never confirmed)."""
        per_message = Counter(d.message_id for d in self.deliveries)
        return sum(n - 1 for n in per_message.values()) - len(self.delivered_after_ack)

    def unacknowledged_deliveries(self) -> set[str]:
        """Messages delivered whose acknowledgement has not been confirmed yet."""
        return {d.message_id for d in self.deliveries} - set(self.confirmed)


def error_kind(response: httpx.Response | None, error: BaseException | None) -> str:
    if error is not None:
        return type(error).__name__
    assert response is not None
    code = ""
    if response.headers.get("content-type", "").startswith("application/problem+json"):
        try:
            code = str(response.json().get("code", ""))
        except ValueError:
            code = "unparsable body"
    return f"{response.status_code} {code}".strip()


def retry_after(response: httpx.Response | None, attempt: int) -> float:
    """Exponential backoff from 50 ms to 1 s, or the server's Retry-After (capped at 2 s)."""
    if response is not None and response.headers.get("retry-after", "").isdigit():
        return min(float(response.headers["retry-after"]), 2.0)
    return float(min(0.05 * 2**attempt, 1.0))


class Apis:
    """The API processes' base URLs, taken in turn; a caller moves on after a failure."""

    def __init__(self, bases: Sequence[str]) -> None:
        self.bases = list(bases)
        self._turn = itertools.count()

    def pick(self) -> tuple[str, str]:
        index = next(self._turn) % len(self.bases)
        return f"api-{index + 1}", self.bases[index]


@dataclass
class Load:
    client: httpx.AsyncClient
    apis: Apis
    queue_id: str
    ledger: Ledger
    producers: int
    rate: float  # enqueues per second, all producers together
    consumers: int
    batch: int
    stop_producing: asyncio.Event = field(default_factory=asyncio.Event)
    stop_consuming: asyncio.Event = field(default_factory=asyncio.Event)
    give_up_after: float = 60.0  # seconds past stop_producing for the number in hand
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- producers ---------------------------------------------------------------------

    async def produce(self) -> None:
        interval = self.producers / self.rate
        next_at = time.monotonic()
        while not self.stop_producing.is_set():
            next_at = max(next_at + interval, time.monotonic() - interval)
            await self.enqueue_until_acknowledged(next(self.numbers))
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def enqueue_until_acknowledged(self, number: int) -> None:
        body = {"payload": f"{PAYLOAD_PREFIX}{number}", "priority": PRIORITIES[number % 3]}
        headers = {"idempotency-key": f"chaos-{number}"}
        deadline: float | None = None
        for attempt in itertools.count():
            if self.stop_producing.is_set():
                deadline = deadline or time.monotonic() + self.give_up_after
                if time.monotonic() > deadline:
                    self.ledger.given_up.add(number)
                    return
            api, base = self.apis.pick()
            response, error = await self._post(
                f"{base}/v1/queues/{self.queue_id}/messages", body, headers
            )
            if response is not None and response.status_code in (200, 201):
                self.ledger.record("enqueue", api, True)
                self.ledger.enqueue_acknowledged(
                    number, response.json()["id"], response.status_code == 200
                )
                return
            self.ledger.record("enqueue", api, False, error_kind(response, error))
            await asyncio.sleep(retry_after(response, attempt))

    # -- consumers ---------------------------------------------------------------------

    async def consume(self, index: int) -> None:
        headers = {"retsu-consumer": f"chaos-consumer-{index}"}
        body = {"max_messages": self.batch, "wait_seconds": 1}
        failures = 0
        while not self.stop_consuming.is_set():
            api, base = self.apis.pick()
            requested_at = time.monotonic()
            response, error = await self._post(
                f"{base}/v1/queues/{self.queue_id}/messages/dequeue", body, headers
            )
            if response is None or response.status_code != 200:
                self.ledger.record("dequeue", api, False, error_kind(response, error))
                failures += 1
                await asyncio.sleep(retry_after(response, failures))
                continue
            failures = 0
            self.ledger.record("dequeue", api, True)
            received_at = time.monotonic()
            deliveries = [
                self.delivery(item, requested_at, received_at)
                for item in response.json()["messages"]
            ]
            for delivery in deliveries:
                self.ledger.delivered(delivery)
            if deliveries:
                await self.acknowledge(deliveries, {d.message_id: d for d in deliveries})

    def delivery(self, item: dict[str, Any], requested_at: float, received_at: float) -> Delivery:
        payload = str(item["payload"])
        number = (
            int(payload[len(PAYLOAD_PREFIX) :])
            if payload.startswith(PAYLOAD_PREFIX) and payload[len(PAYLOAD_PREFIX) :].isdigit()
            else None
        )
        delivery = Delivery(
            message_id=str(item["id"]),
            number=number,
            attempts=int(item["delivery_attempts"]),
            requested_at=requested_at,
            received_at=received_at,
            receipt_handle=str(item["receipt_handle"]),
        )
        return delivery

    async def acknowledge(self, deliveries: list[Delivery], by_id: dict[str, Delivery]) -> bool:
        """One batch acknowledgement, retried while the leases last. True once confirmed."""
        entries = [{"id": d.message_id, "receipt_handle": d.receipt_handle} for d in deliveries]
        lease_end = min(d.received_at for d in deliveries) + self.ledger.visibility_timeout
        for attempt in itertools.count():
            api, base = self.apis.pick()
            sent_at = time.monotonic()
            response, error = await self._post(
                f"{base}/v1/queues/{self.queue_id}/messages/acknowledge",
                {"messages": entries},
                {},
            )
            if response is not None and response.status_code == 204:
                self.ledger.record("acknowledge", api, True)
                for entry in entries:
                    self.ledger.acknowledgement_confirmed(by_id[entry["id"]], sent_at)
                return True
            self.ledger.record("acknowledge", api, False, error_kind(response, error))
            if time.monotonic() + retry_after(response, attempt) > lease_end - LEASE_MARGIN_SECONDS:
                return False  # the messages come back after their lease: that is allowed
            await asyncio.sleep(retry_after(response, attempt))
        return False

    async def _post(
        self, url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[httpx.Response | None, BaseException | None]:
        try:
            return await self.client.post(url, json=body, headers=headers), None
        except httpx.HTTPError as error:
            return None, error
