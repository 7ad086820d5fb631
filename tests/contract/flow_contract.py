"""The contract of SPEC §3.10 and §3.11 for every storage adapter: groups as ordered lanes,
fair service, concurrency caps and rate limits; attempts, completed messages and results,
unclaiming an undeliverable response, search and bulk actions, the groups view.

Mixed into ``RepositoryContract`` (so the PostgreSQL adapter and its memory twin run the
same tests); the ``harness`` fixture comes from there.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from retsu.adapters.ids import uuid7
from retsu.domain.attempts import Outcome
from retsu.domain.audit import AuditAction, AuditEntry
from retsu.domain.browsing import BrowseState, StoredMessage
from retsu.domain.groups import GroupState, GroupSummary
from retsu.domain.message import (
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.queue import QueueSettingsUpdate, RateLimit
from retsu.domain.search import Search
from tests.contract.repository_contract import (
    CALLER,
    RepositoryHarness,
    Scenario,
    add,
    audit_of,
    new_queue,
)


def grouped(
    payload: str,
    group: str | None,
    priority: Priority = Priority.MEDIUM,
    *,
    delay: int = 0,
    ttl: int = 3600,
) -> MessageToStore:
    return MessageToStore(uuid7(), payload, priority, ttl, delay, group)


async def flow(harness: RepositoryHarness, **settings: Any) -> Scenario:
    return Scenario(harness, await add(harness, new_queue(**settings)))


async def claim(
    q: Scenario, limit: int = 10, *, visibility: int = 30, consumer: str | None = None
) -> DequeueResult:
    return await q.messages.dequeue(
        q.id,
        limit=limit,
        visibility_timeout_seconds=visibility,
        dead_letter_batch_size=100,
        consumer=consumer,
    )


async def payloads(q: Scenario, limit: int = 10, **options: Any) -> list[str]:
    return [m.payload for m in (await claim(q, limit, **options)).messages]


async def release(q: Scenario, m: DeliveredMessage, *, error: str | None = None) -> None:
    assert await q.messages.change_visibility(q.id, Receipt(m.id, m.receipt_handle), 0, error=error)


async def show(q: Scenario, message_id: UUID) -> StoredMessage | None:
    return await q.harness.browser.get_message(q.id, message_id)


async def stats(q: Scenario) -> dict[str, int]:
    rows = await q.state.read_state(q.id)
    return {
        "ready": sum(r.ready for r in rows),
        "in_flight": sum(r.in_flight for r in rows),
        "delayed": sum(r.delayed for r in rows),
        "dead_letters": sum(r.dead_letters for r in rows),
        "completed": sum(r.completed for r in rows),
        "groups": sum(r.groups for r in rows),
    }


async def groups(q: Scenario, state: GroupState | None = None) -> list[GroupSummary]:
    found = await q.harness.browser.list_groups(q.id, state=state, limit=100, after=None)
    return [summary for summary, _ in found.items]


class LanesContract:
    """SPEC §3.10: groups are ordered lanes, served fairly."""

    async def test_a_lane_delivers_one_at_a_time_in_enqueue_order_whatever_the_priority(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(
            grouped("a1", "a", Priority.LOW),
            grouped("a2", "a", Priority.HIGH),
            grouped("b1", "b"),
            grouped("plain", None, Priority.LOW),
        )
        first = (await claim(q)).messages
        assert sorted(m.payload for m in first) == ["a1", "b1", "plain"]
        assert {m.payload: m.group for m in first} == {"a1": "a", "b1": "b", "plain": None}
        assert await payloads(q) == []  # a2 waits behind its head, in flight
        assert await q.ack(next(m for m in first if m.payload == "a1")) == 1
        assert await payloads(q) == ["a2"]
        assert await stats(q) == {
            "ready": 0, "in_flight": 3, "delayed": 0, "dead_letters": 0, "completed": 0,
            "groups": 2,
        }  # fmt: skip

    async def test_a_released_or_timed_out_head_comes_back_before_the_rest_of_its_lane(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(grouped("a1", "a"), grouped("a2", "a"))
        (head,) = (await claim(q)).messages
        await release(q, head)
        (again,) = (await claim(q, visibility=5)).messages
        assert (again.id, again.delivery_attempts) == (head.id, 2)
        await q.advance(6)  # its lease ends
        (third,) = (await claim(q)).messages
        assert (third.id, third.delivery_attempts) == (head.id, 3)

    async def test_a_delayed_head_holds_its_lane_until_its_delay_ends(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(grouped("a1", "a", delay=60), grouped("a2", "a"), grouped("b1", "b"))
        assert await payloads(q, visibility=600) == ["b1"]
        assert (await stats(q))["delayed"] == 1
        await q.advance(61)
        assert await payloads(q) == ["a1"]

    async def test_the_next_message_leads_once_the_head_is_dead_lettered_or_deleted(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, max_delivery_attempts=1)
        await q.send(grouped("a1", "a"), grouped("a2", "a"), grouped("a3", "a"))
        assert await payloads(q, visibility=5) == ["a1"]
        await q.advance(6)
        assert (await claim(q)).dead_lettered == 1
        (a2,) = (await claim(q)).messages
        assert a2.payload == "a2"
        deleted = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, q.id, a2.id, CALLER)
        assert await q.harness.browser.delete_message(q.id, a2.id, deleted)
        assert await payloads(q) == ["a3"]
        assert [d.group for d in await q.dead_letter_records()] == ["a"]

    async def test_group_max_in_flight_leases_that_many_in_lane_order(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, group_max_in_flight=3)
        await q.send(*(grouped(f"a{i}", "a") for i in range(1, 6)))
        first = (await claim(q)).messages
        assert [m.payload for m in first] == ["a1", "a2", "a3"]
        assert await payloads(q) == []
        await q.ack(first[1])
        assert await payloads(q) == ["a4"]
        (state,) = await groups(q)
        assert (state.ready, state.in_flight, state.state) == (1, 3, GroupState.BLOCKED)

    async def test_one_claim_takes_followers_only_as_an_unbroken_run(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, group_max_in_flight=5)
        await q.send(grouped("a1", "a"), grouped("a2", "a"), grouped("a3", "a", delay=60))
        await q.send(grouped("a4", "a"))
        assert await payloads(q, visibility=600) == ["a1", "a2"]  # a3's delay holds a4
        await q.advance(61)
        assert await payloads(q) == ["a3", "a4"]

    async def test_fair_service_a_backlog_delays_another_group_by_one_delivery_each(
        self, harness: RepositoryHarness
    ) -> None:
        """SPEC §3.10's example: 1,000 of a, then 10 of b, group_max_in_flight 1000 —
        the first 20 deliveries include all 10 of b."""
        q = await flow(harness, group_max_in_flight=1000)
        await q.send(*(grouped(f"a{i}", "a") for i in range(1000)))
        await q.send(*(grouped(f"b{i}", "b") for i in range(10)))
        one_at_a_time = [p for _ in range(20) for p in await payloads(q, 1)]
        assert sum(p.startswith("b") for p in one_at_a_time) == 10
        assert one_at_a_time[:4] == ["a0", "b0", "a1", "b1"]

    async def test_fair_service_within_one_claim(self, harness: RepositoryHarness) -> None:
        q = await flow(harness, group_max_in_flight=1000)
        await q.send(*(grouped(f"a{i}", "a") for i in range(50)))
        await q.send(*(grouped(f"b{i}", "b") for i in range(3)), grouped("plain", None))
        taken = await payloads(q, 8)
        # Heads first, then each lane's followers round by round (the n-th of every lane).
        assert taken == ["a0", "b0", "plain", "a1", "b1", "a2", "b2", "a3"]

    async def test_the_lanes_a_claim_served_first_wait_first_in_the_next(
        self, harness: RepositoryHarness
    ) -> None:
        """b0 is enqueued before a0, a0 goes first (its priority): the next messages of
        both, of one priority, are served in the order their groups were."""
        q = await flow(harness)
        await q.send(grouped("b0", "b"))
        await q.send(grouped("a0", "a", Priority.HIGH))
        await q.send(grouped("b1", "b"), grouped("a1", "a"))
        first = (await claim(q, 2)).messages
        assert [m.payload for m in first] == ["a0", "b0"]
        await q.ack(*first)
        assert await payloads(q, 2) == ["a1", "b1"]

    async def test_wide_lanes_a_claim_served_first_wait_first_in_the_next(
        self, harness: RepositoryHarness
    ) -> None:
        """a0 is enqueued before all of b, the rest of a after b: a1 is delivered in b0's
        round, before b1, so a's next waits from an earlier delivery than b's."""
        q = await flow(harness, group_max_in_flight=1000)
        await q.send(grouped("a0", "a"))
        await q.send(*(grouped(f"b{i}", "b") for i in range(10)))
        await q.send(*(grouped(f"a{i}", "a") for i in range(1, 10)))
        assert await payloads(q, 4) == ["a0", "b0", "a1", "b1"]
        assert await payloads(q, 2) == ["a2", "b2"]

    async def test_a_higher_priority_head_goes_first(self, harness: RepositoryHarness) -> None:
        q = await flow(harness)
        await q.send(grouped("a1", "a"), grouped("b1", "b", Priority.HIGH))
        assert await payloads(q, 1) == ["b1"]

    async def test_raising_group_max_in_flight_frees_waiting_messages_now(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(*(grouped(f"a{i}", "a") for i in range(4)))
        assert await payloads(q) == ["a0"]
        await q.queues.update_queue(
            q.id, QueueSettingsUpdate(group_max_in_flight=3), audit_of(q.id)
        )
        assert await payloads(q) == ["a1", "a2"]

    async def test_lowering_group_max_in_flight_holds_heads_back(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, group_max_in_flight=3)
        await q.send(*(grouped(f"a{i}", "a") for i in range(4)))
        taken = (await claim(q, 2)).messages
        assert [m.payload for m in taken] == ["a0", "a1"]
        await q.queues.update_queue(
            q.id, QueueSettingsUpdate(group_max_in_flight=1), audit_of(q.id)
        )
        assert await payloads(q) == []
        await q.ack(*taken)
        assert await payloads(q) == ["a2"]

    async def test_purge_expiry_and_redrive_keep_lanes_and_counts(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, max_delivery_attempts=1)
        await q.send(grouped("a1", "a"), grouped("a2", "a", ttl=10), grouped("b1", "b"))
        taken = (await claim(q, visibility=5)).messages
        assert sorted(m.payload for m in taken) == ["a1", "b1"]
        await q.advance(11)  # both leases end; a2 expires behind its head
        assert (await claim(q)).dead_lettered == 2
        expired = await q.maintenance.delete_expired_messages(100)
        assert sum(e.count for e in expired if e.queue_name == q.queue.name) == 1
        assert await stats(q) == {
            "ready": 0, "in_flight": 0, "delayed": 0, "dead_letters": 2, "completed": 0,
            "groups": 0,
        }  # fmt: skip
        bulk = AuditEntry.of_queue(AuditAction.DEAD_LETTER_REDRIVEN, q.id, CALLER)
        assert await q.dead_letters.redrive_dead_letters(q.id, [uuid7(), uuid7()], bulk) == 2
        back = (await claim(q)).messages
        assert sorted((m.payload, m.group) for m in back) == [("a1", "a"), ("b1", "b")]
        await q.send(grouped("a3", "a"))
        assert (await stats(q))["groups"] == 2
        assert await q.queues.purge_queue(q.id, audit_of(q.id, AuditAction.QUEUE_PURGED)) == 3
        assert await stats(q) == {
            "ready": 0, "in_flight": 0, "delayed": 0, "dead_letters": 0, "completed": 0,
            "groups": 0,
        }  # fmt: skip
        await q.send(grouped("a4", "a"))
        assert await payloads(q) == ["a4"]


class LimitsContract:
    """SPEC §3.10: the queue's cap and the token buckets, enforced by the claim."""

    async def test_max_in_flight_caps_active_leases(self, harness: RepositoryHarness) -> None:
        q = await flow(harness, max_in_flight=2)
        await q.send_payloads("m1", "m2", "m3", "m4")
        result = await claim(q)
        assert [m.payload for m in result.messages] == ["m1", "m2"]
        assert result.throttled == "max_in_flight"
        nothing = await claim(q)
        assert (nothing.messages, nothing.throttled) == ([], "max_in_flight")
        await q.ack(result.messages[0])
        assert await payloads(q) == ["m3"]

    async def test_an_exhausted_lease_never_uses_the_cap_of_the_claim_that_buries_it(
        self, harness: RepositoryHarness
    ) -> None:
        """SPEC §3.3: an exhausted message never hides a deliverable one — not through the
        cap either. The released message with no attempts left is not in flight (§3.2),
        so the claim that dead-letters it delivers the next message under a cap of 1."""
        q = await flow(harness, max_in_flight=1, max_delivery_attempts=1)
        await q.send_payloads("spent", "next")
        (spent,) = (await claim(q, 1)).messages
        await release(q, spent)
        result = await claim(q)
        assert (result.dead_lettered, [m.payload for m in result.messages]) == (1, ["next"])

    async def test_an_ended_lease_is_redelivered_under_a_full_cap(
        self, harness: RepositoryHarness
    ) -> None:
        """The lease that ended is the one using the cap: its redelivery replaces it."""
        q = await flow(harness, max_in_flight=1)
        await q.send_payloads("m1", "m2")
        await claim(q, 1, visibility=5)
        await q.advance(6)
        again = await claim(q)
        assert [(m.payload, m.delivery_attempts) for m in again.messages] == [("m1", 2)]

    async def test_an_unreached_cap_throttles_nothing(self, harness: RepositoryHarness) -> None:
        q = await flow(harness, max_in_flight=100)
        await q.send_payloads("m1", "m2")
        result = await claim(q)
        assert (len(result.messages), result.throttled) == (2, None)

    async def test_the_queue_bucket_allows_burst_then_per_second(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, rate_limit=RateLimit(per_second=1, burst=2))
        await q.send_payloads(*(f"m{i}" for i in range(6)))
        result = await claim(q)
        assert ([m.payload for m in result.messages], result.throttled) == (
            ["m0", "m1"],
            "rate_limit",
        )
        assert (await claim(q)).messages == []
        await q.advance(1.05)
        assert await payloads(q) == ["m2"]
        await q.advance(10)  # the bucket fills up to its burst, no further
        assert await payloads(q) == ["m3", "m4"]

    async def test_redeliveries_spend_tokens_too(self, harness: RepositoryHarness) -> None:
        q = await flow(harness, rate_limit=RateLimit(per_second=1, burst=1))
        await q.send_payloads("m")
        (m,) = (await claim(q)).messages
        await release(q, m)
        assert await payloads(q) == []
        await q.advance(1.05)
        assert await payloads(q) == ["m"]

    async def test_a_changed_bucket_starts_full(self, harness: RepositoryHarness) -> None:
        q = await flow(harness, rate_limit=RateLimit(per_second=1, burst=1))
        await q.send_payloads("m1", "m2", "m3", "m4")
        assert await payloads(q) == ["m1"]
        await q.queues.update_queue(
            q.id, QueueSettingsUpdate(rate_limit=RateLimit(per_second=1, burst=3)), audit_of(q.id)
        )
        assert await payloads(q) == ["m2", "m3", "m4"]

    async def test_each_group_has_its_own_bucket_and_ungrouped_messages_none(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(
            harness, group_max_in_flight=10, group_rate_limit=RateLimit(per_second=1, burst=1)
        )
        await q.send(grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b"), grouped("b2", "b"))
        await q.send(grouped("p1", None), grouped("p2", None))
        result = await claim(q)
        assert sorted(m.payload for m in result.messages) == ["a1", "b1", "p1", "p2"]
        assert result.throttled == "group_rate_limit"
        assert await payloads(q) == []
        assert {g.group: g.state for g in await groups(q)} == {
            "a": GroupState.WAITING,
            "b": GroupState.WAITING,
        }
        await q.advance(1.05)
        assert sorted(await payloads(q)) == ["a2", "b2"]

    async def test_a_dequeue_with_nothing_throttled_says_none(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, rate_limit=RateLimit(per_second=5, burst=5))
        await q.send_payloads("m1")
        assert (await claim(q)).throttled is None


class AttemptsContract:
    """SPEC §3.11: every delivery is an attempt; completed messages and results."""

    async def test_attempts_record_consumer_outcome_and_error(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send_payloads("job")
        (first,) = (await claim(q, consumer="worker-1")).messages
        await release(q, first, error="ValueError: boom")
        await claim(q, visibility=5, consumer="worker-2")
        shown = await show(q, first.id)
        assert shown is not None
        one, two = shown.attempts
        assert (one.number, one.consumer, one.outcome, one.error) == (
            1,
            "worker-1",
            Outcome.RELEASED,
            "ValueError: boom",
        )
        assert one.ended_at is not None and one.ended_at >= one.delivered_at
        assert (two.number, two.consumer, two.outcome, two.ended_at) == (
            2,
            "worker-2",
            Outcome.IN_FLIGHT,
            None,
        )
        await q.advance(6)
        shown = await show(q, first.id)
        assert shown is not None
        assert shown.attempts[-1].outcome is Outcome.LEASE_EXPIRED
        assert shown.attempts[-1].ended_at is not None
        (third,) = (await claim(q)).messages
        assert third.delivery_attempts == 3
        shown = await show(q, first.id)
        assert shown is not None
        assert [a.outcome for a in shown.attempts] == [
            Outcome.RELEASED,
            Outcome.LEASE_EXPIRED,
            Outcome.IN_FLIGHT,
        ]

    async def test_an_error_without_a_release_stays_on_the_attempt(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send_payloads("job")
        (m,) = (await claim(q)).messages
        assert await q.messages.change_visibility(
            q.id, Receipt(m.id, m.receipt_handle), 60, error="slow"
        )
        shown = await show(q, m.id)
        assert shown is not None
        (attempt,) = shown.attempts
        assert (attempt.outcome, attempt.error) == (Outcome.IN_FLIGHT, "slow")

    async def test_a_dead_letter_keeps_its_attempts_and_last_error(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, max_delivery_attempts=2)
        await q.send_payloads("poison")
        (m,) = (await claim(q)).messages
        await release(q, m, error="first")
        (m,) = (await claim(q, visibility=5)).messages
        await q.advance(6)
        assert (await claim(q)).dead_lettered == 1
        (dead,) = await q.dead_letter_records()
        assert [a.outcome for a in dead.attempts] == [Outcome.RELEASED, Outcome.LEASE_EXPIRED]
        assert dead.last_error == "first"
        listed = await q.dead_letters.list_dead_letters(q.id, limit=5, after=None)
        assert [d.attempts for d, _ in listed.items] == [dead.attempts]

    async def test_completed_messages_are_kept_with_their_result_then_cleaned(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness, completed_retention_seconds=60)
        await q.send_payloads("job", "other")
        first, second = (await claim(q)).messages
        done = await q.messages.acknowledge(
            q.id, [Receipt(first.id, first.receipt_handle, result='{"ok": true}')]
        )
        assert done.removed == 1
        await q.ack(second)
        shown = await show(q, first.id)
        assert shown is not None
        assert (shown.state, shown.result) == (BrowseState.COMPLETED, '{"ok": true}')
        assert shown.completed_at is not None
        assert [a.outcome for a in shown.attempts] == [Outcome.ACKNOWLEDGED]
        assert (await stats(q))["completed"] == 2
        assert [m.payload for m in await self._list(q, None)] == []
        assert [m.payload for m in await self._list(q, BrowseState.COMPLETED)] == [
            "other",
            "job",
        ]
        # Not live: purge and a repeated acknowledge leave them be.
        assert await q.queues.purge_queue(q.id, audit_of(q.id, AuditAction.QUEUE_PURGED)) == 0
        assert (
            await q.messages.acknowledge(q.id, [Receipt(first.id, first.receipt_handle)])
        ).removed == 0
        await q.advance(61)
        assert await q.maintenance.delete_completed_messages(100) >= 2
        assert await show(q, first.id) is None
        assert (await stats(q))["completed"] == 0

    async def test_without_retention_an_acknowledged_message_is_gone(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send_payloads("job")
        (m,) = (await claim(q)).messages
        await q.messages.acknowledge(q.id, [Receipt(m.id, m.receipt_handle, result="r")])
        assert await show(q, m.id) is None
        assert (await stats(q))["completed"] == 0

    async def test_an_unclaimed_delivery_is_delivered_again_with_the_attempt_uncounted(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(grouped("a1", "a"), grouped("a2", "a"))
        (m,) = (await claim(q, consumer="gone")).messages
        assert await q.messages.unclaim(q.id, [Receipt(m.id, m.receipt_handle)]) == 1
        assert await q.messages.unclaim(q.id, [Receipt(m.id, m.receipt_handle)]) == 0
        shown = await show(q, m.id)
        assert shown is not None
        assert (shown.state, shown.delivery_attempts, shown.attempts) == (BrowseState.READY, 0, ())
        (again,) = (await claim(q, consumer="alive")).messages
        assert (again.id, again.delivery_attempts) == (m.id, 1)
        assert not await q.messages.change_visibility(q.id, Receipt(m.id, m.receipt_handle), 0)

    async def _list(self, q: Scenario, state: BrowseState | None) -> list[StoredMessage]:
        batch = await q.harness.browser.list_messages(
            q.id, state=state, priority=None, limit=50, after=None
        )
        return batch.messages


class SearchContract:
    """SPEC §3.11: search by group and JSON containment; bulk actions with a dry run."""

    async def _matching(self, q: Scenario, **options: Any) -> list[str]:
        batch = await q.harness.browser.list_messages(
            q.id, state=None, priority=None, limit=50, after=None, **options
        )
        return [m.payload for m in batch.messages]

    async def test_match_is_json_containment_and_group_filters(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        documents = [
            {"kind": "email", "to": {"domain": "x.io"}, "tags": ["a", "b"]},
            {"kind": "email", "to": {"domain": "y.io"}, "n": 1.0},
            {"kind": "sms", "tags": ["b"]},
        ]
        await q.send(*(grouped(json.dumps(d), None) for d in documents))
        await q.send(grouped("not json {", None), grouped('"kind"', "g"))
        await q.send(grouped(json.dumps({"kind": "email"}), "g"))
        assert len(await self._matching(q, match={"kind": "email"})) == 3
        assert len(await self._matching(q, match={"to": {"domain": "x.io"}})) == 1
        assert len(await self._matching(q, match={"tags": ["b"]})) == 2
        assert len(await self._matching(q, match={"n": 1})) == 1
        assert len(await self._matching(q, match={})) == 4  # every JSON object
        assert await self._matching(q, group="g") == ['"kind"', json.dumps({"kind": "email"})]
        assert await self._matching(q, group="g", match={"kind": "email"}) == [
            json.dumps({"kind": "email"})
        ]

    async def test_bulk_delete_dry_run_then_real_keeps_counts_exact(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(*(grouped(json.dumps({"n": i % 3}), "a" if i < 4 else None) for i in range(9)))
        (held,) = (await claim(q, 1)).messages  # a's head (n=0), in flight
        search = Search(match={"n": 0})
        browser = q.harness.browser
        assert await browser.count_messages(q.id, state=None, search=search, limit=100) == 3
        assert (
            await browser.count_messages(q.id, state=BrowseState.READY, search=search, limit=1) == 1
        )
        audit = AuditEntry.of_queue(AuditAction.MESSAGE_DELETED, q.id, CALLER)
        deleted = await browser.delete_messages(
            q.id, state=BrowseState.READY, search=search, limit=100, audit=audit
        )
        assert deleted == 2
        assert await stats(q) == {
            "ready": 6, "in_flight": 1, "delayed": 0, "dead_letters": 0, "completed": 0,
            "groups": 1,
        }  # fmt: skip
        (row, *_) = await q.audit_log.list_audit_records(
            limit=1, after=None, queue_id=q.id, action=AuditAction.MESSAGE_DELETED
        )
        assert row.details["deleted"] == 2
        await q.ack(held)
        assert json.loads((await claim(q, 1)).messages[0].payload) == {"n": 1}  # a's next

    async def test_dead_letters_search_delete_and_redrive(self, harness: RepositoryHarness) -> None:
        q = await flow(harness, max_delivery_attempts=1, group_max_in_flight=3)
        await q.send(*(grouped(json.dumps({"n": i}), "g" if i % 2 else None) for i in range(6)))
        await claim(q, 6, visibility=5)
        await q.advance(6)
        assert (await claim(q)).dead_lettered == 6
        dead_letters = q.dead_letters
        found = await dead_letters.list_dead_letters(
            q.id, limit=10, after=None, search=Search(group="g")
        )
        assert sorted(json.loads(d.payload)["n"] for d, _ in found.items) == [1, 3, 5]
        assert await dead_letters.count_dead_letters(q.id, Search(match={"n": 4}), 10) == 1
        audit = AuditEntry.of_queue(AuditAction.DEAD_LETTER_DELETED, q.id, CALLER)
        assert await dead_letters.delete_dead_letters(q.id, Search(match={"n": 4}), 10, audit) == 1
        redrive = AuditEntry.of_queue(AuditAction.DEAD_LETTER_REDRIVEN, q.id, CALLER)
        moved = await dead_letters.redrive_dead_letters(
            q.id, [uuid7() for _ in range(5)], redrive, Search(group="g")
        )
        assert moved == 3
        assert await stats(q) == {
            "ready": 3, "in_flight": 0, "delayed": 0, "dead_letters": 2, "completed": 0,
            "groups": 1,
        }  # fmt: skip
        assert [json.loads(p)["n"] for p in await payloads(q)] == [1, 3, 5]  # its lane's order


class GroupsViewContract:
    """SPEC §3.10: the groups list, the longest-waiting first."""

    async def test_groups_are_listed_with_their_counts_head_and_state(
        self, harness: RepositoryHarness
    ) -> None:
        q = await flow(harness)
        await q.send(grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b", delay=60))
        await q.send(grouped("c1", "c"), grouped("plain", None))
        assert await payloads(q, 1) == ["a1"]
        listed = await groups(q)
        assert [g.group for g in listed] == ["b", "c", "a"]  # a was just served
        by_name = {g.group: g for g in listed}
        assert (by_name["a"].ready, by_name["a"].in_flight, by_name["a"].state) == (
            1,
            1,
            GroupState.BLOCKED,
        )
        assert by_name["a"].head_delivery_attempts == 1
        assert by_name["a"].last_delivered_at is not None
        assert (by_name["b"].delayed, by_name["b"].state) == (1, GroupState.WAITING)
        assert (by_name["c"].ready, by_name["c"].state) == (1, GroupState.READY)
        assert [g.group for g in await groups(q, GroupState.READY)] == ["c"]
        page = await q.harness.browser.list_groups(q.id, state=None, limit=2, after=None)
        assert [g.group for g, _ in page.items] == ["b", "c"]
        rest = await q.harness.browser.list_groups(
            q.id, state=None, limit=2, after=page.items[-1][1]
        )
        assert [g.group for g, _ in rest.items] == ["a"]
        assert (await stats(q))["groups"] == 3


class FlowContract(
    LanesContract, LimitsContract, AttemptsContract, SearchContract, GroupsViewContract
):
    """Everything of §3.10–3.11 that storage decides."""
