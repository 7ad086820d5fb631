"""Message rules: priority, lifetime and delay, payload, dequeue options, receipts, ids."""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import time
import uuid

import pytest

from retsu.adapters.ids import uuid7
from retsu.adapters.system import Uuid7Generator
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import InvalidInput
from retsu.domain.message import NewMessage, Priority, validate_payload
from retsu.domain.queue import QueueSettings
from retsu.domain.receipt import new_receipt_handle, parse_receipt_handle

MESSAGE_ID = uuid.UUID("01890000-0000-7000-8000-000000000001")


def _code(raised: pytest.ExceptionInfo[InvalidInput]) -> str:
    return raised.value.code


# -- priority -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "priority"),
    [("HIGH", Priority.HIGH), ("MEDIUM", Priority.MEDIUM), ("LOW", Priority.LOW)],
)
def test_a_priority_is_one_of_high_medium_low(text: str, priority: Priority) -> None:
    assert Priority.parse(text) is priority


def test_a_higher_priority_is_a_larger_stored_number() -> None:
    assert (Priority.LOW, Priority.MEDIUM, Priority.HIGH) == (1, 2, 3)
    assert sorted(Priority, reverse=True) == [Priority.HIGH, Priority.MEDIUM, Priority.LOW]


@pytest.mark.parametrize(
    "text",
    ["high", "High", "medium", "low", "", " HIGH", "HIGH ", "URGENT", "3", "1", 3, None, True],
)
def test_anything_else_is_invalid_priority(text: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        Priority.parse(text)  # type: ignore[arg-type]
    assert _code(raised) == "invalid_priority"


# -- lifetime and delay -------------------------------------------------------


@pytest.mark.parametrize("ttl", [1, 2, 2_591_999, 2_592_000])
def test_a_ttl_from_1_s_to_30_days_is_accepted(ttl: int) -> None:
    assert NewMessage.parse("x", "LOW", ttl_seconds=ttl).ttl_seconds == ttl


@pytest.mark.parametrize("ttl", [0, -1, 2_592_001, True, False, 1.5, "60"])
def test_a_ttl_outside_1_s_to_30_days_is_invalid_ttl(ttl: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        NewMessage.parse("x", "LOW", ttl_seconds=ttl)  # type: ignore[arg-type]
    assert _code(raised) == "invalid_ttl"


@pytest.mark.parametrize("delay", [0, 1, 86_399, 86_400])
def test_a_delay_from_0_to_one_day_is_accepted(delay: int) -> None:
    assert NewMessage.parse("x", "LOW", delay_seconds=delay).delay_seconds == delay


@pytest.mark.parametrize("delay", [-1, 86_401, True, False, 0.5, "0"])
def test_a_delay_outside_0_to_one_day_is_invalid_delay(delay: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        NewMessage.parse("x", "LOW", delay_seconds=delay)  # type: ignore[arg-type]
    assert _code(raised) == "invalid_delay"


def test_a_message_without_ttl_lives_as_long_as_the_queue_default() -> None:
    stored = NewMessage.parse("x", "HIGH").to_store(
        MESSAGE_ID, QueueSettings(default_message_ttl_seconds=90)
    )
    assert stored.ttl_seconds == 90
    assert stored.delay_seconds == 0
    assert stored.id == MESSAGE_ID
    assert stored.priority is Priority.HIGH


def test_a_message_ttl_overrides_the_queue_default() -> None:
    stored = NewMessage.parse("x", "LOW", ttl_seconds=5).to_store(
        MESSAGE_ID, QueueSettings(default_message_ttl_seconds=90)
    )
    assert stored.ttl_seconds == 5


@pytest.mark.parametrize(("delay", "ok"), [(58, True), (59, True), (60, False), (61, False)])
def test_a_delay_must_be_shorter_than_the_queue_default_lifetime(delay: int, ok: bool) -> None:
    message = NewMessage.parse("x", "LOW", delay_seconds=delay)
    settings = QueueSettings(default_message_ttl_seconds=60)
    if ok:
        assert message.to_store(MESSAGE_ID, settings).delay_seconds == delay
    else:
        with pytest.raises(InvalidInput) as raised:
            message.to_store(MESSAGE_ID, settings)
        assert _code(raised) == "invalid_delay"


@pytest.mark.parametrize(("ttl", "ok"), [(11, True), (10, False), (9, False)])
def test_a_delay_must_be_shorter_than_the_message_own_ttl(ttl: int, ok: bool) -> None:
    # The queue default would allow the delay; the message's own lifetime does not.
    message = NewMessage.parse("x", "LOW", ttl_seconds=ttl, delay_seconds=10)
    settings = QueueSettings(default_message_ttl_seconds=3600)
    if ok:
        assert message.to_store(MESSAGE_ID, settings).ttl_seconds == ttl
    else:
        with pytest.raises(InvalidInput) as raised:
            message.to_store(MESSAGE_ID, settings)
        assert _code(raised) == "invalid_delay"


def test_a_message_ttl_longer_than_its_delay_wins_over_a_short_queue_default() -> None:
    message = NewMessage.parse("x", "LOW", ttl_seconds=120, delay_seconds=100)
    stored = message.to_store(MESSAGE_ID, QueueSettings(default_message_ttl_seconds=1))
    assert (stored.ttl_seconds, stored.delay_seconds) == (120, 100)


def test_a_zero_delay_is_fine_even_with_a_one_second_lifetime() -> None:
    stored = NewMessage.parse("x", "LOW", ttl_seconds=1, delay_seconds=0).to_store(
        MESSAGE_ID, QueueSettings()
    )
    assert stored.delay_seconds == 0


# -- payload ------------------------------------------------------------------


@pytest.mark.parametrize("payload", ["\x00", "a\x00b", "tail\x00", '{"a":"\x00"}'])
def test_a_payload_with_nul_is_invalid_payload(payload: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        validate_payload(payload)
    assert _code(raised) == "invalid_payload"
    with pytest.raises(InvalidInput) as raised:
        NewMessage.parse(payload, "LOW")
    assert _code(raised) == "invalid_payload"


@pytest.mark.parametrize(
    "payload", ["", "plain", '{"json": true}', "キュー 🚀", "\x01\x1f\x7f", "line\nbreak\t"]
)
def test_any_other_text_is_a_valid_payload(payload: str) -> None:
    assert NewMessage.parse(payload, "MEDIUM").payload == payload


# -- dequeue options ----------------------------------------------------------


def test_dequeue_options_default_to_no_wait_one_bare_message_and_the_queue_timeout() -> None:
    options = DequeueOptions()
    assert options.wait_seconds == 0
    assert options.visibility_timeout_seconds is None
    assert options.max_messages is None
    assert options.limit == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("wait_seconds", 0),
        ("wait_seconds", 1),
        ("wait_seconds", 19),
        ("wait_seconds", 20),
        ("visibility_timeout_seconds", 1),
        ("visibility_timeout_seconds", 2),
        ("visibility_timeout_seconds", 21_599),
        ("visibility_timeout_seconds", 21_600),
        ("max_messages", 1),
        ("max_messages", 2),
        ("max_messages", 99),
        ("max_messages", 100),
    ],
)
def test_dequeue_options_inside_their_ranges_are_accepted(field: str, value: int) -> None:
    assert getattr(DequeueOptions(**{field: value}), field) == value


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("wait_seconds", -1, "invalid_wait_seconds"),
        ("wait_seconds", 21, "invalid_wait_seconds"),
        ("wait_seconds", True, "invalid_wait_seconds"),
        ("visibility_timeout_seconds", 0, "invalid_visibility_timeout"),
        ("visibility_timeout_seconds", 21_601, "invalid_visibility_timeout"),
        ("visibility_timeout_seconds", True, "invalid_visibility_timeout"),
        ("max_messages", 0, "invalid_max_messages"),
        ("max_messages", 101, "invalid_max_messages"),
        ("max_messages", True, "invalid_max_messages"),
    ],
)
def test_dequeue_options_outside_their_ranges_carry_their_own_code(
    field: str, value: object, code: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        DequeueOptions(**{field: value})  # type: ignore[arg-type]
    assert _code(raised) == code


def test_max_messages_is_the_dequeue_limit() -> None:
    assert DequeueOptions(max_messages=7).limit == 7


# -- receipt handles ----------------------------------------------------------


def test_a_new_receipt_handle_parses_back_to_its_uuid() -> None:
    handle = new_receipt_handle()
    assert parse_receipt_handle(handle) == uuid.UUID(handle)


def test_receipt_handles_are_never_reused() -> None:
    assert len({new_receipt_handle() for _ in range(1000)}) == 1000


def test_a_receipt_handle_in_another_spelling_of_the_same_uuid_is_the_same_handle() -> None:
    handle = new_receipt_handle()
    assert parse_receipt_handle(handle.upper()) == uuid.UUID(handle)


@pytest.mark.parametrize(
    "handle",
    [
        "",
        "junk",
        "not-a-uuid-at-all",
        "0" * 65,
        "6f1c2a4e-5b7d-4c8e-9f10-1a2b3c4d5e6fx",
        "6f1c2a4e-5b7d-4c8e-9f10-1a2b3c4d5e6f" + " " * 40,
        None,
        42,
        b"\x00" * 16,
    ],
)
def test_a_handle_that_cannot_be_ours_parses_to_nothing(handle: object) -> None:
    assert parse_receipt_handle(handle) is None  # type: ignore[arg-type]


# -- ids ----------------------------------------------------------------------


def test_ids_are_uuid_version_7_with_the_rfc_variant() -> None:
    for _ in range(100):
        value = uuid7()
        assert value.version == 7
        assert value.variant == uuid.RFC_4122


def test_ids_are_strictly_increasing_across_ten_thousand_calls() -> None:
    ids = [Uuid7Generator().new_id() for _ in range(10_000)]
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))
    assert all(value.version == 7 for value in ids)


def test_ids_made_in_one_millisecond_still_increase() -> None:
    ids = [uuid7() for _ in range(20_000)]
    per_millisecond = collections.Counter(value.int >> 80 for value in ids)
    assert max(per_millisecond.values()) > 1  # a burst shares milliseconds...
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))  # ...in order


def test_ids_made_on_several_threads_are_distinct_and_each_thread_sees_them_increase() -> None:
    def burst(_: int) -> list[uuid.UUID]:
        return [uuid7() for _ in range(2_000)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        bursts = list(pool.map(burst, range(4)))
    assert len({value for ids in bursts for value in ids}) == 8_000
    for ids in bursts:
        assert all(earlier < later for earlier, later in itertools.pairwise(ids))


def test_a_batch_of_ids_shares_its_counter_shard_and_still_increases() -> None:
    # PostgreSQL counts a message in the counter row of its id's last five bits; one
    # batch in one shard keeps concurrent batch enqueues off each other's row locks.
    batches = [Uuid7Generator().new_ids(100) for _ in range(200)]
    for ids in batches:
        assert len({value.int & 0x1F for value in ids}) == 1
        assert all(value.version == 7 and value.variant == uuid.RFC_4122 for value in ids)
    flat = [value for ids in batches for value in ids]
    assert all(earlier < later for earlier, later in itertools.pairwise(flat))
    generator = Uuid7Generator()  # single ids and batches come from one sequence
    mixed = [i for _ in range(500) for i in (generator.new_id(), *generator.new_ids(3))]
    assert all(earlier < later for earlier, later in itertools.pairwise(mixed))
    assert len({ids[0].int & 0x1F for ids in batches}) > 8  # batches spread over shards


def test_an_id_carries_its_creation_time_in_milliseconds() -> None:
    before = int(time.time() * 1000)
    value = uuid7()
    after = int(time.time() * 1000)
    embedded = value.int >> 80
    # Ids made in a burst may borrow a few milliseconds ahead; never from the past.
    assert before - 1 <= embedded <= after + 1000
