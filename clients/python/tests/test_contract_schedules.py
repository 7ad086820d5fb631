"""Schedules (SPEC §3.12) through the client and retsuctl — against a real server, and
against the in-memory fake once it serves them (the fake being rebuilt to run the real
application serves every route; until then it answers these with 404 not_found, and the
``schedule_target`` fixture marks its run as an expected failure)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from client_support import ADMIN, RealServer, Target, unique
from retsu_client import (
    Client,
    InvalidRequest,
    Priority,
    QueueNotFound,
    Schedule,
    ScheduleAlreadyExists,
    ScheduleMessage,
    ScheduleNotFound,
)
from retsu_client.cli.ctl import main


@pytest.fixture
def schedule_target(target: Target) -> Iterator[Target]:
    if target.fake is not None:
        with httpx.Client(transport=target.fake.transport(), base_url=target.url) as raw:
            probe = raw.get(
                "/v1/queues/00000000-0000-7000-8000-000000000000/schedules",
                headers={"authorization": f"Bearer {ADMIN}"},
            )
        if probe.json().get("code") == "not_found":  # no such route: the fake predates them
            pytest.xfail("the in-memory fake does not serve schedules yet")
    yield target


@pytest.fixture(scope="module")
def real_scheduler(real_server: RealServer, tmp_path_factory: pytest.TempPathFactory) -> RealServer:
    real_server.start_scheduler(tmp_path_factory.mktemp("retsu-scheduler"))
    return real_server


NIGHTLY = ScheduleMessage(payload='{"report": "daily"}', priority=Priority.HIGH, ttl_seconds=3600)


def test_a_schedule_is_created_read_listed_changed_and_deleted(schedule_target: Target) -> None:
    retsu = schedule_target.client()
    queue = retsu.create_queue(unique("sched")).name
    made = retsu.create_schedule(
        queue, "nightly", NIGHTLY, cron="30 2 * * *", timezone="Europe/Berlin"
    )
    assert isinstance(made, Schedule)
    assert (made.cron, made.every_seconds, made.timezone, made.paused) == (
        "30 2 * * *",
        None,
        "Europe/Berlin",
        False,
    )
    assert made.message == NIGHTLY
    assert made.next_run_at is not None and made.last_run_at is None
    tick = retsu.create_schedule(queue, "tick", "t", every_seconds=600, priority="LOW")
    assert tick.next_run_at is not None and tick.message.priority is Priority.LOW
    assert (tick.next_run_at - tick.created_at).total_seconds() == pytest.approx(600, abs=0.01)

    assert retsu.get_schedule(queue, made.id) == made
    assert [s.name for s in retsu.list_schedules(queue).items] == ["nightly", "tick"]
    assert [s.name for s in retsu.iter_schedules(queue, page_size=1)] == ["nightly", "tick"]

    changed = retsu.update_schedule(queue, made, every_seconds=60, name="often")
    assert (changed.name, changed.cron, changed.every_seconds) == ("often", None, 60)
    paused = retsu.pause_schedule(queue, tick)
    assert paused.paused is True and paused.next_run_at is None
    resumed = retsu.resume_schedule(queue, tick.id)
    assert resumed.paused is False and resumed.next_run_at is not None

    retsu.delete_schedule(queue, tick)
    with pytest.raises(ScheduleNotFound) as missing:
        retsu.get_schedule(queue, tick)
    assert missing.value.status == 404 and missing.value.code == "schedule_not_found"
    actions = [e.action for e in retsu.iter_audit_log(queue=queue) if e.target_type == "schedule"]
    assert actions == [
        "schedule.deleted",
        "schedule.resumed",
        "schedule.paused",
        "schedule.updated",
        "schedule.created",
        "schedule.created",
    ]


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"cron": "every night"}, "invalid_cron"),
        ({}, "invalid_cron"),
        ({"cron": "* * * * *", "every_seconds": 5}, "invalid_cron"),
        ({"every_seconds": 0}, "invalid_every_seconds"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Base"}, "invalid_timezone"),
    ],
)
def test_bad_definitions_raise_with_their_code(
    schedule_target: Target, kwargs: dict[str, object], code: str
) -> None:
    retsu = schedule_target.client()
    queue = retsu.create_queue(unique("sched")).name
    with pytest.raises(InvalidRequest) as raised:
        retsu.create_schedule(queue, "x", "p", **kwargs)  # type: ignore[arg-type]
    assert raised.value.code == code and raised.value.status == 400


def test_a_taken_name_and_a_missing_queue(schedule_target: Target) -> None:
    retsu = schedule_target.client()
    queue = retsu.create_queue(unique("sched")).name
    retsu.create_schedule(queue, "once", "p", every_seconds=60)
    with pytest.raises(ScheduleAlreadyExists):
        retsu.create_schedule(queue, "once", "p", every_seconds=60)
    with pytest.raises(QueueNotFound):
        retsu.list_schedules("00000000-0000-7000-8000-000000000000")


async def test_the_async_client_covers_the_same_routes(schedule_target: Target) -> None:
    async with schedule_target.async_client() as retsu:
        queue = (await retsu.create_queue(unique("sched"))).name
        made = await retsu.create_schedule(queue, "tick", "p", every_seconds=30)
        assert (await retsu.get_schedule(queue, made)).id == made.id
        assert [s.id async for s in retsu.iter_schedules(queue)] == [made.id]
        assert (await retsu.update_schedule(queue, made, timezone="Asia/Tokyo")).timezone == (
            "Asia/Tokyo"
        )
        assert (await retsu.pause_schedule(queue, made)).paused is True
        assert (await retsu.resume_schedule(queue, made)).paused is False
        await retsu.delete_schedule(queue, made)
        assert (await retsu.list_schedules(queue)).items == []


@pytest.mark.real_server
def test_the_scheduler_enqueues_messages_that_carry_their_schedule(
    real_scheduler: RealServer,
) -> None:
    """The scheduler is a worker process: this runs against the real server only."""
    with Client(real_scheduler.url, token=ADMIN) as retsu:
        queue = retsu.create_queue(unique("sched")).name
        made = retsu.create_schedule(
            queue,
            "tick",
            ScheduleMessage(payload="t", priority=Priority.LOW, group="g"),
            every_seconds=1,
        )
        deadline = time.monotonic() + 15
        while len(retsu.list_messages(queue).items) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        messages = retsu.list_messages(queue).items
        assert len(messages) >= 2
        assert {(m.schedule_id, m.payload, m.group) for m in messages} == {(made.id, "t", "g")}
        assert retsu.get_schedule(queue, made).last_run_at is not None


# -- retsuctl schedules ----------------------------------------------------------------------


def ctl(
    target: Target, capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = ""
) -> tuple[int, str, str]:
    transport = target.fake.transport() if target.fake is not None else None
    code = main(
        ["--url", target.url, "--token", ADMIN, *argv],
        transport=transport,
        stdin=io.StringIO(stdin),
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_retsuctl_schedules(schedule_target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    queue = schedule_target.client().create_queue(unique("ctl")).name
    code, out, _ = ctl(
        schedule_target,
        capsys,
        "schedules", "create", queue, "nightly", "--cron", "30 2 * * *",
        "--timezone", "Europe/Berlin", "--payload", "-", "--priority", "HIGH", "--group", "g",
        stdin='{"report": "daily"}',
    )  # fmt: skip
    assert code == 0
    shown = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert shown["when"] == "30 2 * * *" and shown["timezone"] == "Europe/Berlin"
    assert shown["payload"] == '{"report": "daily"}' and shown["group"] == "g"

    code, out, _ = ctl(schedule_target, capsys, "schedules", "list", queue)
    header, row = out.strip().splitlines()
    assert header.split()[:4] == ["NAME", "ID", "WHEN", "TIMEZONE"]
    assert row.startswith("nightly") and "30 2 * * *" in row and "Europe/Berlin" in row

    code, out, _ = ctl(schedule_target, capsys, "--json", "schedules", "show", queue, "nightly")
    assert code == 0 and json.loads(out)["name"] == "nightly"

    # Pause and delete ask first; "n" (or no answer) changes nothing and exits 1.
    code, _, err = ctl(schedule_target, capsys, "schedules", "pause", queue, "nightly", stdin="n\n")
    assert code == 1 and "[y/N]" in err and "nothing was changed" in err
    code, out, _ = ctl(schedule_target, capsys, "schedules", "pause", queue, "nightly", stdin="y\n")
    assert (
        code == 0
        and dict(line.split(None, 1) for line in out.strip().splitlines())["paused"] == "yes"
    )
    code, out, _ = ctl(schedule_target, capsys, "schedules", "resume", queue, "nightly")
    assert code == 0
    code, _, err = ctl(schedule_target, capsys, "schedules", "delete", queue, "nightly")
    assert code == 1 and "[y/N]" in err
    code, out, _ = ctl(schedule_target, capsys, "schedules", "delete", queue, "nightly", "--yes")
    assert code == 0 and "deleted schedule nightly" in out
    code, _, err = ctl(schedule_target, capsys, "schedules", "show", queue, "nightly")
    assert code == 1 and "no schedule named 'nightly'" in err
    code, _, err = ctl(
        schedule_target, capsys, "schedules", "create", queue, "x", "--cron", "nope",
        "--payload", "p",
    )  # fmt: skip
    assert code == 1 and "invalid_cron" in err
    with pytest.raises(SystemExit) as usage:  # --cron or --every, exactly one
        ctl(schedule_target, capsys, "schedules", "create", queue, "x", "--payload", "p")
    assert usage.value.code == 2
