"""retsuctl: tables for people, the API's JSON for scripts, exit codes 0/1/2, confirmations."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import httpx
import pytest

from client_support import ADMIN, CLIENT_SRC, Target, fake_target, unique
from retsu_client.cli.ctl import main


class Run:
    """retsuctl in-process against a target."""

    def __init__(self, target: Target, capsys: pytest.CaptureFixture[str]) -> None:
        self.target, self.capsys = target, capsys

    def __call__(self, *argv: str, stdin: str = "") -> tuple[int, str, str]:
        transport = self.target.fake.transport() if self.target.fake is not None else None
        args = ["--url", self.target.url, "--token", ADMIN, *argv]
        code = main(args, transport=transport, stdin=io.StringIO(stdin))
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def run(target: Target, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(target, capsys)


@pytest.fixture
def run_fake(capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(fake_target(), capsys)


def test_queues_create_list_and_show(run: Run) -> None:
    name = unique("ctl")
    code, out, _ = run(
        "queues", "create", name, "--visibility-timeout", "45", "--max-attempts", "3"
    )
    assert code == 0 and name in out and "45" in out

    code, out, _ = run("queues", "list", "--name", name)
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "ID", "VISIBILITY_S", "MAX_ATTEMPTS", "TTL_S", "PAUSED"]
    assert row.split()[0] == name and row.split()[2:] == ["45", "3", "604800", "no"]
    # numbers are right-aligned under their header (" 45 ": an id may contain "45" too)
    assert row.index(" 45 ") + 3 == header.index("VISIBILITY_S") + len("VISIBILITY_S")

    run("messages", "send", name, "hello", "--priority", "HIGH")
    code, out, _ = run("queues", "show", name)
    assert code == 0
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert lines["ready"] == "1" and lines["paused"] == "no" and lines["name"] == name


def test_json_prints_the_apis_own_answer(run: Run, target: Target) -> None:
    name = unique("ctl")
    code, out, _ = run("queues", "create", name, "--json")
    created = json.loads(out)
    assert code == 0 and created["name"] == name and set(created) >= {"id", "paused"}

    code, out, _ = run("--json", "queues", "show", name)
    shown = json.loads(out)
    direct = target.client().get_queue(created["id"])
    assert shown["id"] == direct.id and shown["stats"]["ready"] == 0

    code, out, _ = run("queues", "list", "--name", name, "--json")
    assert json.loads(out) == {"items": [created], "next_cursor": None}

    code, out, _ = run("queues", "purge", name, "--yes", "--json")
    assert json.loads(out) == {"purged": 0}


def test_an_api_error_exits_1_and_prints_its_problem(run: Run) -> None:
    code, out, err = run("queues", "show", unique("missing"))
    assert code == 1 and out == ""
    assert "queue_not_found (404)" in err

    code, out, err = run("queues", "create", "Not A Name", "--json")
    problem = json.loads(err)
    assert code == 1 and problem["code"] == "invalid_queue_name" and problem["status"] == 400


def test_a_usage_error_exits_2(run: Run) -> None:
    with pytest.raises(SystemExit) as exit_:
        run("queues", "frobnicate")
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        run("messages", "send", "q", "x", "--priority", "URGENT")
    assert exit_.value.code == 2


def test_an_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--url", "http://127.0.0.1:9", "--timeout", "2", "queues", "list"])
    assert code == 1 and "error:" in capsys.readouterr().err


def test_destructive_commands_ask_first(run: Run, target: Target) -> None:
    name = unique("ctl")
    run("queues", "create", name)
    run("messages", "send", name, "precious")

    code, _, err = run("queues", "purge", name, stdin="n\n")
    assert code == 1 and "1 ready" in err and "aborted" in err
    assert target.client().get_queue(name).stats.ready == 1

    code, out, _ = run("queues", "purge", name, stdin="yes\n")
    assert code == 0 and "purged 1" in out

    code, _, err = run("queues", "delete", name, stdin="")  # no answer: no
    assert code == 1 and target.client().get_queue(name).name == name
    code, out, _ = run("queues", "delete", name, "--yes")
    assert code == 0 and f"deleted queue {name}" in out


def test_pause_resume_and_update(run: Run) -> None:
    name = unique("ctl")
    run("queues", "create", name)

    assert "paused                       yes" in run("queues", "pause", name)[1]
    assert "paused                       no" in run("queues", "resume", name)[1]
    code, out, _ = run("queues", "update", name, "--ttl", "3600")
    assert code == 0 and "3600" in out


def test_messages_send_reads_stdin_and_honours_the_key(run: Run, target: Target) -> None:
    name = unique("ctl")
    run("queues", "create", name)

    code, first, _ = run("messages", "send", name, "-", "--idempotency-key", "k1", stdin="{}")
    code2, again, _ = run("messages", "send", name, "-", "--idempotency-key", "k1", stdin="{}")

    assert code == code2 == 0
    assert again.split()[0] == first.strip() and "replayed" in again
    assert target.client().get_queue(name).stats.ready == 1


def test_dead_letters_list_show_redrive_and_delete(run_fake: Run) -> None:
    target = run_fake.target
    retsu = target.client()
    name = retsu.create_queue(
        unique("dlq"), visibility_timeout_seconds=1, max_delivery_attempts=1
    ).name
    retsu.enqueue_batch(name, ['{"n": 1}', "two", "three"])
    retsu.dequeue_many(name, 3)
    target.sleep(2)
    retsu.dequeue(name)
    records = retsu.list_dead_letters(name).items

    code, out, _ = run_fake("dead-letters", "list", name)
    assert code == 0 and out.count("MAX_DELIVERY_ATTEMPTS_EXHAUSTED") == 3

    code, out, _ = run_fake("dead-letters", "show", name, records[2].id)
    assert code == 0 and '"n": 1' in out  # a JSON payload is pretty-printed

    code, out, _ = run_fake("dead-letters", "redrive", name, records[2].id)
    assert code == 0 and "redriven as message" in out

    code, _, err = run_fake("dead-letters", "redrive", name)
    assert code == 2 and "--all" in err

    code, _, _ = run_fake("dead-letters", "redrive", name, "--all", stdin="n\n")
    assert code == 1 and len(retsu.list_dead_letters(name).items) == 2

    code, _, _ = run_fake("dead-letters", "delete", name, records[0].id, "--yes")
    assert code == 0
    code, out, _ = run_fake("dead-letters", "redrive", name, "--all", "--limit", "5", "--yes")
    assert code == 0 and "redriven 1" in out
    assert retsu.list_dead_letters(name).items == []


def test_messages_browse_show_and_delete(run_fake: Run) -> None:
    retsu = run_fake.target.client()
    name = retsu.create_queue(unique("ctl")).name
    first = retsu.enqueue(name, '{"to": "ada"}', priority="HIGH").id
    retsu.enqueue(name, "later", delay_seconds=60)

    code, out, _ = run_fake("messages", "browse", name, "--state", "ready")
    assert code == 0 and first in out and "later" not in out

    code, out, _ = run_fake("messages", "show", name, first)
    assert code == 0 and '"to": "ada"' in out and "ready" in out

    code, out, _ = run_fake("messages", "delete", name, first, "--yes")
    assert code == 0
    code, _, err = run_fake("messages", "show", name, first)
    assert code == 1 and "message_not_found" in err


def test_lists_page_with_a_cursor_or_all(run_fake: Run) -> None:
    retsu = run_fake.target.client()
    prefix = unique("page")
    for suffix in "abc":
        retsu.create_queue(f"{prefix}-{suffix}")

    code, out, err = run_fake("queues", "list", "--limit", "2")
    assert code == 0 and len(out.strip().splitlines()) == 3 and "--cursor" in err
    cursor = err.split("--cursor ")[1].split(",")[0]
    code, out, _ = run_fake("queues", "list", "--limit", "2", "--cursor", cursor)
    assert f"{prefix}-c" in out
    code, out, _ = run_fake("queues", "list", "--limit", "1", "--all")
    assert all(f"{prefix}-{s}" in out for s in "abc")
    code, out, _ = run_fake("queues", "list", "--stats")
    assert "READY" in out.splitlines()[0]


def test_consumers_audit_and_history(run_fake: Run) -> None:
    target = run_fake.target
    retsu = target.client()
    name = retsu.create_queue(unique("ctl")).name
    retsu.enqueue(name, "x")
    retsu.dequeue(name, consumer="billing-1")
    target.sleep(16)  # one history snapshot on the fake's clock

    code, out, _ = run_fake("consumers", "--queue", name)
    assert code == 0 and "billing-1" in out and "stale" not in out
    code, out, _ = run_fake("audit", "--queue", name, "--action", "queue.created")
    assert code == 0 and "queue.created" in out and "admin" in out
    code, out, _ = run_fake("history", name, "--minutes", "5")
    assert code == 0 and "interval: 15s" in out and "ENQUEUED" in out


def test_the_console_script_entry_point_runs() -> None:
    env_path = {"PYTHONPATH": str(CLIENT_SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "retsu_client.cli.ctl", "queues", "nope"],
        capture_output=True,
        text=True,
        env={**_clean_env(), **env_path},
        check=False,
    )
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_url_and_token_come_from_the_environment(
    target: Target, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RETSU_URL", target.url)
    monkeypatch.setenv("RETSU_TOKEN", ADMIN)
    transport: httpx.BaseTransport | None = None
    if target.fake is not None:
        transport = target.fake.transport()

    code = main(["queues", "create", unique("env")], transport=transport)

    assert code == 0, capsys.readouterr().err


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("RETSU_")}


def test_flow_control_settings_on_create_update_and_show(run: Run, target: Target) -> None:
    name = unique("ctl")
    code, out, _ = run(
        "queues",
        "create",
        name,
        "--group-max-in-flight",
        "2",
        "--max-in-flight",
        "10",
        "--rate-limit",
        "5:10",
        "--group-rate-limit",
        "0.5",
        "--completed-retention",
        "60",
    )
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert code == 0
    assert (lines["group_max_in_flight"], lines["max_in_flight"]) == ("2", "10")
    assert lines["rate_limit"] == "5/s, burst 10"
    assert lines["group_rate_limit"] == "0.5/s, burst 1"
    assert lines["completed_retention_seconds"] == "60"

    code, out, _ = run("queues", "update", name, "--max-in-flight", "none", "--rate-limit", "none")
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert code == 0 and (lines["max_in_flight"], lines["rate_limit"]) == ("none", "none")
    assert lines["group_rate_limit"] == "0.5/s, burst 1"  # not given: unchanged
    queue = target.client().get_queue(name)
    assert (queue.max_in_flight, queue.rate_limit, queue.group_max_in_flight) == (None, None, 2)

    code, out, _ = run("queues", "show", name)
    assert code == 0 and "groups" in out and "completed" in out
    for bad in (["--rate-limit", "fast"], ["--max-in-flight", "lots"]):
        with pytest.raises(SystemExit) as exit_:
            run("queues", "update", name, *bad)
        assert exit_.value.code == 2


def test_groups_lists_a_queues_lanes(run: Run) -> None:
    name = unique("ctl")
    run("queues", "create", name)
    run("messages", "send", name, "one", "--group", "tenant-a")
    run("messages", "send", name, "two", "--group", "tenant-a")
    run("messages", "send", name, "three", "--group", "tenant-b", "--delay", "60")

    code, out, _ = run("groups", name)
    header, *rows = out.strip().splitlines()
    assert code == 0 and header.split()[:5] == ["GROUP", "STATE", "READY", "IN_FLIGHT", "DELAYED"]
    assert sorted(row.split()[:2] for row in rows) == [
        ["tenant-a", "ready"],
        ["tenant-b", "waiting"],
    ]

    code, out, _ = run("groups", name, "--state", "waiting")
    assert code == 0 and "tenant-b" in out and "tenant-a" not in out
    code, out, _ = run("groups", name, "--json")
    assert code == 0 and len(json.loads(out)["items"]) == 2


def test_messages_list_searches_and_show_prints_the_timeline(run_fake: Run) -> None:
    retsu = run_fake.target.client(consumer="mailer-1")
    name = retsu.create_queue(unique("ctl"), completed_retention_seconds=60).name
    wanted = retsu.enqueue_json(name, {"customer": 42}, group="c42").id
    message = retsu.dequeue(name)
    assert message is not None and message.id == wanted
    retsu.release(name, message, error="SMTPError: 451 try again")
    message = retsu.dequeue(name)
    assert message is not None and message.id == wanted
    retsu.acknowledge(name, message, result='{"sent": true}')
    retsu.enqueue_json(name, {"customer": 7})

    code, out, _ = run_fake("messages", "list", name, "--match", '{"customer": 7}')
    assert code == 0 and '{"customer":7}' in out and "c42" not in out
    code, out, _ = run_fake("messages", "browse", name, "--state", "completed", "--group", "c42")
    assert code == 0 and wanted in out

    code, out, _ = run_fake("messages", "show", name, wanted)
    assert code == 0 and "completed_at" in out
    timeline = out[out.index("attempts:") :]
    assert "released" in timeline and "SMTPError: 451 try again" in timeline
    assert "acknowledged" in timeline and timeline.count("mailer-1") == 2
    assert '"sent": true' in out  # the result, pretty-printed

    with pytest.raises(SystemExit) as exit_:
        run_fake("messages", "list", name, "--match", "{not json")
    assert exit_.value.code == 2
    code, _, err = run_fake("messages", "list", name, "--match", "[1]")
    assert code == 1 and "invalid_match" in err


def test_bulk_message_delete_asks_with_the_dry_run_count(run_fake: Run) -> None:
    retsu = run_fake.target.client()
    name = retsu.create_queue(unique("ctl")).name
    for n in range(3):
        retsu.enqueue_json(name, {"tenant": "a", "n": n})
    retsu.enqueue_json(name, {"tenant": "b"})
    match = ["--match", '{"tenant": "a"}']

    code, _, err = run_fake("messages", "delete", name)
    assert code == 2 and "--match" in err
    code, out, _ = run_fake("messages", "delete", name, *match, "--dry-run")
    assert code == 0 and "3 live message(s)" in out and "nothing was changed" in out
    code, _, err = run_fake("messages", "delete", name, *match, stdin="n\n")
    assert code == 1 and "Delete 3 live message(s)" in err and '{"tenant":"a"}' in err
    assert retsu.get_queue(name).stats.ready == 4

    code, out, _ = run_fake("messages", "delete", name, *match, "--limit", "2", stdin="y\n")
    assert code == 0 and "deleted 2" in out
    code, out, _ = run_fake("messages", "delete", name, *match, "--yes", "--json")
    assert code == 0 and json.loads(out) == {"deleted": 1}
    code, _, err = run_fake("messages", "delete", name, *match)
    assert code == 0 and "nothing to do" in err
    assert [m.json() for m in retsu.iter_messages(name)] == [{"tenant": "b"}]


def test_dead_letters_redrive_and_delete_by_filter(run_fake: Run) -> None:
    target = run_fake.target
    retsu = target.client()
    name = retsu.create_queue(
        unique("dlq"), visibility_timeout_seconds=1, max_delivery_attempts=1, group_max_in_flight=3
    ).name
    retsu.enqueue_batch(name, ['{"n": 1}', '{"n": 2}', '{"n": 3}'], group="g")
    for message in retsu.dequeue_many(name, 3):
        retsu.release(name, message, error="boom")
    retsu.dequeue(name)

    code, out, _ = run_fake("dead-letters", "list", name, "--match", '{"n": 2}')
    assert code == 0 and out.count("MAX_DELIVERY_ATTEMPTS_EXHAUSTED") == 1 and "boom" in out
    record = retsu.list_dead_letters(name).items[0]
    code, out, _ = run_fake("dead-letters", "show", name, record.id)
    assert code == 0 and "last_error" in out and "attempts:" in out and "released" in out

    code, out, _ = run_fake("dead-letters", "redrive", name, "--match", '{"n": 2}', "--dry-run")
    assert code == 0 and "1 dead letter(s)" in out
    code, _, err = run_fake("dead-letters", "redrive", name, "--group", "g", stdin="n\n")
    assert code == 1 and "Redrive (oldest first) 3 dead letter(s)" in err
    code, out, _ = run_fake("dead-letters", "redrive", name, "--match", '{"n": 2}', "--yes")
    assert code == 0 and "redriven 1" in out

    code, _, err = run_fake("dead-letters", "delete", name, "--match", '{"n": 1}', stdin="y\n")
    assert code == 0 and "Delete 1 dead letter(s)" in err
    code, _, err = run_fake("dead-letters", "delete", name, record.id, "--match", '{"n": 1}')
    assert code == 2
    assert [d.payload for d in retsu.list_dead_letters(name).items] == ['{"n": 3}']
    assert [m.payload for m in retsu.iter_messages(name)] == ['{"n": 2}']
