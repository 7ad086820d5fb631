"""Schedules' rules (SPEC §3.12): validation codes, due times across daylight-saving
changes, misfires, and the message id of a due time."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from retsu.adapters.cron import CRON_CALENDAR
from retsu.domain.errors import InvalidInput
from retsu.domain.message import Priority
from retsu.domain.schedule import (
    MessageTemplate,
    Recurrence,
    ScheduleUpdate,
    due_time_of,
    scheduled_message_id,
    validate_schedule_name,
    validate_timezone,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def cron(expression: str, timezone: str = "UTC") -> Recurrence:
    return Recurrence.parse(
        cron=expression, every_seconds=None, timezone=timezone, calendar=CRON_CALENDAR
    )


def due_times(recurrence: Recurrence, start: datetime, count: int) -> list[datetime]:
    """The due times a schedule made at ``start`` runs, one run each (no misfire)."""
    found = [recurrence.first_due(start, CRON_CALENDAR)]
    while len(found) < count:
        next_due, missed = recurrence.advance(found[-1], found[-1], CRON_CALENDAR)
        assert missed == 0
        found.append(next_due)
    return found


def local(moments: list[datetime], zone: ZoneInfo) -> list[str]:
    return [m.astimezone(zone).strftime("%m-%d %H:%M%z") for m in moments]


def code_of(call: object) -> str:
    assert callable(call)
    with pytest.raises(InvalidInput) as raised:
        call()
    return raised.value.code


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a b", "x" * 65, "é"])
def test_a_schedule_name_follows_the_queue_name_rule(name: str) -> None:
    assert code_of(lambda: validate_schedule_name(name)) == "invalid_schedule_name"


def test_good_names_pass() -> None:
    assert validate_schedule_name("nightly.report_2-a") == "nightly.report_2-a"


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ({"cron": None, "every_seconds": None}, "invalid_cron"),
        ({"cron": "* * * * *", "every_seconds": 5}, "invalid_cron"),
        ({"cron": "* * * *", "every_seconds": None}, "invalid_cron"),
        ({"cron": "* * * * * *", "every_seconds": None}, "invalid_cron"),
        ({"cron": "@daily", "every_seconds": None}, "invalid_cron"),
        ({"cron": "61 * * * *", "every_seconds": None}, "invalid_cron"),
        ({"cron": "0 0 30 2 *", "every_seconds": None}, "invalid_cron"),
        ({"cron": "", "every_seconds": None}, "invalid_cron"),
        ({"cron": None, "every_seconds": 0}, "invalid_every_seconds"),
        ({"cron": None, "every_seconds": 2_592_001}, "invalid_every_seconds"),
        ({"cron": None, "every_seconds": True}, "invalid_every_seconds"),
    ],
)
def test_a_recurrence_is_exactly_one_valid_kind(given: dict[str, object], code: str) -> None:
    assert (
        code_of(lambda: Recurrence.parse(**given, timezone=None, calendar=CRON_CALENDAR))  # type: ignore[arg-type]
        == code
    )


def test_a_cron_expression_is_normalised_and_names_are_read() -> None:
    recurrence = cron("  0   12 * *   mon-fri ")
    assert recurrence.cron == "0 12 * * mon-fri"
    assert recurrence.first_due(utc(2026, 1, 3, 13), CRON_CALENDAR) == utc(2026, 1, 5, 12)
    every = Recurrence.parse(cron=None, every_seconds=1, timezone=None, calendar=CRON_CALENDAR)
    assert every == Recurrence(every_seconds=1, timezone="UTC")


@pytest.mark.parametrize(
    "zone", ["", "Mars/Olympus", "europe/berlin", "Europe", "../etc/passwd", "localtime", "x" * 300]
)
def test_a_timezone_must_be_an_iana_name(zone: str) -> None:
    assert code_of(lambda: validate_timezone(zone)) == "invalid_timezone"


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"])
def test_iana_names_pass(zone: str) -> None:
    assert validate_timezone(zone) == zone


@pytest.mark.parametrize(
    ("template", "code"),
    [
        ({"payload": "x", "priority": "URGENT"}, "invalid_priority"),
        ({"payload": "x", "priority": "LOW", "ttl_seconds": 0}, "invalid_ttl"),
        ({"payload": "x", "priority": "LOW", "group": ""}, "invalid_group"),
        ({"payload": "x", "priority": "LOW", "group": "a b"}, "invalid_group"),
        ({"payload": "a\x00b", "priority": "LOW"}, "invalid_payload"),
    ],
)
def test_the_message_template_keeps_the_messages_own_codes(
    template: dict[str, object], code: str
) -> None:
    assert code_of(lambda: MessageTemplate.read(template)) == code


def test_an_update_needs_a_change_and_at_most_one_kind() -> None:
    assert code_of(lambda: ScheduleUpdate.parse({}, CRON_CALENDAR)) == "empty_schedule_update"
    assert (
        code_of(lambda: ScheduleUpdate.parse({"name": None}, CRON_CALENDAR))
        == "empty_schedule_update"
    )
    both = {"cron": "* * * * *", "every_seconds": 2}
    assert code_of(lambda: ScheduleUpdate.parse(both, CRON_CALENDAR)) == "invalid_cron"
    assert code_of(lambda: ScheduleUpdate.parse({"timezone": "Nope/x"}, CRON_CALENDAR)) == (
        "invalid_timezone"
    )


# -- due times -------------------------------------------------------------------------


def test_an_interval_is_due_one_interval_after_creation_then_on_its_grid() -> None:
    every = Recurrence(every_seconds=10)
    start = utc(2026, 1, 1, 0, 0, 0) + timedelta(microseconds=123_456)
    first = every.first_due(start, CRON_CALENDAR)
    assert first == start + timedelta(seconds=10)
    # Run 0.4 s late: the grid stays (no drift).
    assert every.advance(first, first + timedelta(seconds=0.4), CRON_CALENDAR) == (
        first + timedelta(seconds=10),
        0,
    )


def test_due_times_missed_while_nothing_ran_are_skipped_and_counted_not_burst() -> None:
    every = Recurrence(every_seconds=60)
    due = utc(2026, 1, 1, 0, 1)
    # Nothing ran for an hour: this due time runs (late), the 59 after it are skipped.
    next_due, missed = every.advance(due, utc(2026, 1, 1, 1, 0, 30), CRON_CALENDAR)
    assert (next_due, missed) == (utc(2026, 1, 1, 1, 1), 59)
    nightly = cron("0 2 * * *")
    next_due, missed = nightly.advance(utc(2026, 1, 1, 2), utc(2026, 1, 4, 9), CRON_CALENDAR)
    assert (next_due, missed) == (utc(2026, 1, 5, 2), 3)  # the 2nd, 3rd and 4th


def test_cron_follows_its_time_zone() -> None:
    nightly = cron("0 2 * * *", "Europe/Berlin")
    # Winter: 02:00 CET is 01:00Z; summer: 02:00 CEST is 00:00Z.
    assert nightly.first_due(utc(2026, 1, 10, 12), CRON_CALENDAR) == utc(2026, 1, 11, 1)
    assert nightly.first_due(utc(2026, 7, 10, 12), CRON_CALENDAR) == utc(2026, 7, 11, 0)


def test_spring_forward_a_job_in_the_skipped_hour_runs_once_just_after_the_jump() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    times = due_times(cron("30 2 * * *", "Europe/Berlin"), utc(2026, 3, 27, 12), 4)
    assert local(times, BERLIN) == [
        "03-28 02:30+0100",
        "03-29 03:00+0200",  # the skipped 02:30, run once at the first moment after
        "03-30 02:30+0200",
        "03-31 02:30+0200",
    ]
    assert times[1] == utc(2026, 3, 29, 1)


def test_spring_forward_hourly_and_quarter_hourly_jobs_lose_only_the_missing_hour() -> None:
    hourly = due_times(cron("0 * * * *", "Europe/Berlin"), utc(2026, 3, 28, 23, 30), 4)
    assert local(hourly, BERLIN) == [
        "03-29 01:00+0100",
        "03-29 03:00+0200",
        "03-29 04:00+0200",
        "03-29 05:00+0200",
    ]
    assert [b - a for a, b in itertools.pairwise(hourly)] == [timedelta(hours=1)] * 3
    quarter = due_times(cron("*/15 * * * *", "Europe/Berlin"), utc(2026, 3, 29, 0, 40), 3)
    assert local(quarter, BERLIN) == ["03-29 01:45+0100", "03-29 03:00+0200", "03-29 03:15+0200"]


def test_fall_back_a_fixed_time_job_in_the_repeated_hour_runs_once() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    times = due_times(cron("30 2 * * *", "Europe/Berlin"), utc(2026, 10, 23, 12), 4)
    assert local(times, BERLIN) == [
        "10-24 02:30+0200",
        "10-25 02:30+0200",  # the first 02:30 only
        "10-26 02:30+0100",
        "10-27 02:30+0100",
    ]


def test_fall_back_a_wildcard_job_runs_in_both_copies_of_the_hour() -> None:
    times = due_times(cron("*/30 * * * *", "Europe/Berlin"), utc(2026, 10, 24, 23, 10), 6)
    assert local(times, BERLIN) == [
        "10-25 01:30+0200",
        "10-25 02:00+0200",
        "10-25 02:30+0200",
        "10-25 02:00+0100",
        "10-25 02:30+0100",
        "10-25 03:00+0100",
    ]
    # Every real half hour, none twice.
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(minutes=30)] * 5


def test_restarting_inside_the_repeated_hour_never_goes_back_or_repeats() -> None:
    # A scheduler that computes the next due time from a moment inside the second 02:xx.
    nightly = cron("30 2 * * *", "Europe/Berlin")
    inside = utc(2026, 10, 25, 1, 0)  # 02:00 CET, after the first 02:30 (00:30Z) ran
    assert nightly.advance(utc(2026, 10, 25, 0, 30), inside, CRON_CALENDAR) == (
        utc(2026, 10, 26, 1, 30),
        0,
    )


def test_new_york_changes_at_its_own_dates() -> None:
    # America/New_York: spring forward 2026-03-08 02:00 -> 03:00, fall back 2026-11-01.
    spring = due_times(cron("30 2 * * *", "America/New_York"), utc(2026, 3, 6, 12), 3)
    assert local(spring, NEW_YORK) == ["03-07 02:30-0500", "03-08 03:00-0400", "03-09 02:30-0400"]
    fall = due_times(cron("30 1 * * *", "America/New_York"), utc(2026, 10, 30, 12), 3)
    assert local(fall, NEW_YORK) == ["10-31 01:30-0400", "11-01 01:30-0400", "11-02 01:30-0500"]


# -- the message of a due time ---------------------------------------------------------


def test_a_due_times_message_id_is_a_uuid7_that_names_its_due_time() -> None:
    schedule = uuid.uuid4()
    due = utc(2026, 5, 1, 12, 0, 0) + timedelta(microseconds=250_000)
    message_id = scheduled_message_id(schedule, due)
    assert message_id.version == 7 and message_id.variant == uuid.RFC_4122
    assert due_time_of(message_id) == due - timedelta(microseconds=0)
    assert scheduled_message_id(schedule, due) == message_id
    assert scheduled_message_id(schedule, due + timedelta(seconds=1)) != message_id
    assert scheduled_message_id(uuid.uuid4(), due) != message_id
    later = scheduled_message_id(schedule, due + timedelta(seconds=1))
    assert later > message_id  # time-ordered


def test_a_template_stores_as_a_message_of_its_schedule() -> None:
    template = MessageTemplate.parse("report", "HIGH", ttl_seconds=60, group="g")
    schedule, message_id = uuid.uuid4(), uuid.uuid4()
    stored = template.to_store(message_id, schedule)
    assert (stored.priority, stored.ttl_seconds, stored.delay_seconds) == (Priority.HIGH, 60, 0)
    assert (stored.group, stored.schedule_id, stored.id) == ("g", schedule, message_id)
