"""``retsuctl``: the operator command line over the HTTP API.

Tables for people by default; ``--json`` prints the API's own JSON answer for that call
(one page for lists; nothing for a ``204``). Exit status: 0 success, 1 an API error (its
problem printed on stderr) or an unreachable server or a refused confirmation, 2 a usage
error. Purge, deletes, bulk redrive and pausing a schedule (its due times meanwhile are
skipped, never caught up) ask for confirmation unless ``--yes``; a bulk delete or redrive
asks with the count its dry run found (``--dry-run`` only counts).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import httpx
import msgspec

from retsu_client.cli.common import CONNECTION_HELP, Recorder, connection_options, print_error
from retsu_client.cli.tables import fields, shorten, table
from retsu_client.client import Client
from retsu_client.errors import RetsuError, ScheduleNotFound
from retsu_client.models import (
    UNSET,
    Attempt,
    AuditEntry,
    Consumer,
    DeadLetter,
    Group,
    HistoryPoint,
    Page,
    Priority,
    Queue,
    QueueDetails,
    RateLimit,
    Schedule,
    ScheduleMessage,
    StoredMessage,
)

PRIORITIES = ("HIGH", "MEDIUM", "LOW")
STATES = ("ready", "in_flight", "delayed", "completed")
GROUP_STATES = ("ready", "blocked", "waiting")
HEALTH = ("healthy", "stale", "offline")
NONE = "none"  # the word that removes a limit


def _count_or_none(text: str) -> int | None:
    """N, or ``none`` (no cap)."""
    if text.lower() == NONE:
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or {NONE}: {text!r}") from None


def _rate_limit(text: str) -> RateLimit | None:
    """PER_SECOND[:BURST], or ``none`` (no limit)."""
    if text.lower() == NONE:
        return None
    per_second, _, burst = text.partition(":")
    try:
        return RateLimit(per_second=float(per_second), burst=int(burst) if burst else None)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected PER_SECOND[:BURST] (e.g. 10 or 2.5:20) or {NONE}: {text!r}"
        ) from None


def _json_object(text: str) -> Any:
    """--match: JSON text (whether it is an object is the server's to say)."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise argparse.ArgumentTypeError(
            f"expected JSON, e.g. '{{\"customer\": 42}}': {text!r}"
        ) from None


@dataclass
class Context:
    client: Client
    recorder: Recorder
    args: argparse.Namespace
    out: TextIO
    err: TextIO
    stdin: TextIO

    @property
    def as_json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def raw(self) -> None:
        """Print the last answer's body as the API sent it."""
        last = self.recorder.last
        if last is not None and last.content:
            print(last.text, file=self.out)

    def say(self, text: str) -> None:
        print(text, file=self.out)

    def confirm(self, question: str) -> bool:
        if getattr(self.args, "yes", False):
            return True
        print(f"{question} [y/N] ", end="", file=self.err, flush=True)
        answer = self.stdin.readline()
        if answer.strip().lower() in ("y", "yes"):
            return True
        newline = "" if answer.endswith("\n") else "\n"  # no answer (end of input)
        print(f"{newline}aborted: nothing was changed", file=self.err)
        return False


Command = Callable[[Context], int]


def _page_hint(ctx: Context, page: Page[Any]) -> None:
    if page.next_cursor is not None:
        print(f"(more: --cursor {page.next_cursor}, or --all)", file=ctx.err)


def _pages(ctx: Context, fetch: Callable[[str | None], Page[Any]]) -> Iterator[Page[Any]]:
    """The requested page, or every page with --all (tables only)."""
    follow = bool(getattr(ctx.args, "all", False))
    cursor = getattr(ctx.args, "cursor", None)
    while True:
        page = fetch(cursor)
        yield page
        if page.next_cursor is None:
            return
        if not follow:
            _page_hint(ctx, page)
            return
        cursor = page.next_cursor


def _listing(
    ctx: Context,
    fetch: Callable[[str | None], Page[Any]],
    headers: Sequence[str],
    row: Callable[[Any], Sequence[Any]],
) -> int:
    if ctx.as_json:
        fetch(getattr(ctx.args, "cursor", None))
        ctx.raw()
        return 0
    rows = [row(item) for page in _pages(ctx, fetch) for item in page.items]
    ctx.say(table(headers, rows) if rows else "(none)")
    return 0


def _pretty_payload(payload: str) -> str:
    try:
        decoded = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return payload
    return msgspec.json.format(msgspec.json.encode(decoded), indent=2).decode()


# --- queues ------------------------------------------------------------------------------


def _queue_row(queue: Queue) -> Sequence[Any]:
    return (
        queue.name,
        queue.id,
        queue.visibility_timeout_seconds,
        queue.max_delivery_attempts,
        queue.default_message_ttl_seconds,
        queue.paused,
    )


def queues_list(ctx: Context) -> int:
    args = ctx.args
    headers = ["NAME", "ID", "VISIBILITY_S", "MAX_ATTEMPTS", "TTL_S", "PAUSED"]
    if not args.stats or ctx.as_json:
        return _listing(
            ctx,
            lambda c: ctx.client.list_queues(name=args.name, limit=args.limit, cursor=c),
            headers,
            _queue_row,
        )

    def row(queue: Queue) -> Sequence[Any]:
        stats = ctx.client.get_queue(queue.id).stats
        return (
            *_queue_row(queue),
            stats.ready,
            stats.in_flight,
            stats.delayed,
            stats.dead_letters,
            stats.oldest_ready_age_seconds,
        )

    headers += ["READY", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST_S"]
    return _listing(
        ctx,
        lambda c: ctx.client.list_queues(name=args.name, limit=args.limit, cursor=c),
        headers,
        row,
    )


def _show_queue(ctx: Context, queue: Queue | QueueDetails) -> int:
    if ctx.as_json:
        ctx.raw()
        return 0
    pairs: list[tuple[str, Any]] = [
        ("name", queue.name),
        ("id", queue.id),
        ("paused", queue.paused),
        ("visibility_timeout_seconds", queue.visibility_timeout_seconds),
        ("max_delivery_attempts", queue.max_delivery_attempts),
        ("default_message_ttl_seconds", queue.default_message_ttl_seconds),
    ]
    pairs += [
        ("group_max_in_flight", queue.group_max_in_flight),
        ("max_in_flight", _or_none(queue.max_in_flight)),
        ("rate_limit", _rate_text(queue.rate_limit)),
        ("group_rate_limit", _rate_text(queue.group_rate_limit)),
        ("completed_retention_seconds", queue.completed_retention_seconds),
    ]
    if isinstance(queue, QueueDetails):
        stats = queue.stats
        pairs += [
            ("ready", stats.ready),
            ("in_flight", stats.in_flight),
            ("delayed", stats.delayed),
            ("dead_letters", stats.dead_letters),
            ("oldest_ready_age_seconds", stats.oldest_ready_age_seconds),
            ("groups", stats.groups),
            ("completed", stats.completed),
        ]
    ctx.say(fields(pairs))
    return 0


def _or_none(value: Any) -> Any:
    return NONE if value is None else value


def _rate_text(limit: RateLimit | None) -> str:
    if limit is None:
        return NONE
    return f"{limit.per_second:g}/s, burst {limit.burst}"


def queues_show(ctx: Context) -> int:
    return _show_queue(ctx, ctx.client.get_queue(ctx.args.queue))


def queues_create(ctx: Context) -> int:
    args = ctx.args
    queue = ctx.client.create_queue(
        args.name,
        visibility_timeout_seconds=args.visibility_timeout,
        max_delivery_attempts=args.max_attempts,
        default_message_ttl_seconds=args.ttl,
        group_max_in_flight=args.group_max_in_flight,
        # "none" at creation is what leaving it out means: no limit.
        max_in_flight=None if args.max_in_flight is UNSET else args.max_in_flight,
        rate_limit=None if args.rate_limit is UNSET else args.rate_limit,
        group_rate_limit=None if args.group_rate_limit is UNSET else args.group_rate_limit,
        completed_retention_seconds=args.completed_retention,
    )
    return _show_queue(ctx, queue)


def queues_update(ctx: Context) -> int:
    args = ctx.args
    queue = ctx.client.update_queue(
        args.queue,
        visibility_timeout_seconds=args.visibility_timeout,
        max_delivery_attempts=args.max_attempts,
        default_message_ttl_seconds=args.ttl,
        group_max_in_flight=args.group_max_in_flight,
        max_in_flight=args.max_in_flight,  # UNSET when not given; None ("none") removes it
        rate_limit=args.rate_limit,
        group_rate_limit=args.group_rate_limit,
        completed_retention_seconds=args.completed_retention,
    )
    return _show_queue(ctx, queue)


def queues_pause(ctx: Context) -> int:
    return _show_queue(ctx, ctx.client.pause_queue(ctx.args.queue))


def queues_resume(ctx: Context) -> int:
    return _show_queue(ctx, ctx.client.resume_queue(ctx.args.queue))


def queues_purge(ctx: Context) -> int:
    queue = ctx.args.queue
    if not ctx.args.yes:
        details = ctx.client.get_queue(queue)
        s = details.stats
        live = f"{s.ready} ready, {s.in_flight} in flight, {s.delayed} delayed"
        if not ctx.confirm(f"Purge every live message of queue {details.name} ({live})?"):
            return 1
    purged = ctx.client.purge_queue(queue)
    if ctx.as_json:
        ctx.raw()
    else:
        ctx.say(f"purged {purged} message(s)")
    return 0


def queues_delete(ctx: Context) -> int:
    queue = ctx.args.queue
    if not ctx.confirm(f"Delete queue {queue} with its messages and dead letters?"):
        return 1
    ctx.client.delete_queue(queue)
    if not ctx.as_json:
        ctx.say(f"deleted queue {queue}")
    return 0


# --- schedules -----------------------------------------------------------------------------


def _when(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return schedule.cron
    return f"every {schedule.every_seconds}s"


def _schedule_row(schedule: Schedule) -> Sequence[Any]:
    return (
        schedule.name,
        schedule.id,
        _when(schedule),
        schedule.timezone,
        str(schedule.message.priority),
        schedule.paused,
        schedule.next_run_at,
        schedule.last_run_at,
    )


def _schedule(ctx: Context, queue: str, ref: str) -> str:
    """A schedule's id, from its id or its name (one walk over the queue's schedules)."""
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    for schedule in ctx.client.iter_schedules(queue):
        if schedule.name == ref:
            return schedule.id
    raise ScheduleNotFound(f"Queue {queue} has no schedule named {ref!r}.", status=404)


def _show_schedule(ctx: Context, schedule: Schedule) -> int:
    if ctx.as_json:
        ctx.raw()
        return 0
    message = schedule.message
    ctx.say(
        fields(
            [
                ("name", schedule.name),
                ("id", schedule.id),
                ("queue_id", schedule.queue_id),
                ("when", _when(schedule)),
                ("timezone", schedule.timezone),
                ("paused", schedule.paused),
                ("next_run_at", schedule.next_run_at),
                ("last_run_at", schedule.last_run_at),
                ("created_at", schedule.created_at),
                ("priority", str(message.priority)),
                ("ttl_seconds", message.ttl_seconds),
                ("group", message.group),
                ("payload", shorten(message.payload, 200)),
            ]
        )
    )
    return 0


def schedules_list(ctx: Context) -> int:
    args = ctx.args
    headers = ["NAME", "ID", "WHEN", "TIMEZONE", "PRIORITY", "PAUSED", "NEXT_RUN", "LAST_RUN"]
    return _listing(
        ctx,
        lambda c: ctx.client.list_schedules(args.queue, limit=args.limit, cursor=c),
        headers,
        _schedule_row,
    )


def schedules_show(ctx: Context) -> int:
    args = ctx.args
    schedule_id = _schedule(ctx, args.queue, args.schedule)
    return _show_schedule(ctx, ctx.client.get_schedule(args.queue, schedule_id))


def schedules_create(ctx: Context) -> int:
    args = ctx.args
    payload = ctx.stdin.read() if args.payload == "-" else args.payload
    message = ScheduleMessage(
        payload=payload, priority=Priority(args.priority), ttl_seconds=args.ttl, group=args.group
    )
    schedule = ctx.client.create_schedule(
        args.queue,
        args.name,
        message,
        cron=args.cron,
        every_seconds=args.every,
        timezone=args.timezone,
        paused=True if args.paused else None,
    )
    return _show_schedule(ctx, schedule)


def schedules_pause(ctx: Context) -> int:
    args = ctx.args
    schedule_id = _schedule(ctx, args.queue, args.schedule)
    question = (
        f"Pause schedule {args.schedule} of queue {args.queue}? Its due times are skipped "
        "until it is resumed."
    )
    if not ctx.confirm(question):
        return 1
    return _show_schedule(ctx, ctx.client.pause_schedule(args.queue, schedule_id))


def schedules_resume(ctx: Context) -> int:
    args = ctx.args
    schedule_id = _schedule(ctx, args.queue, args.schedule)
    return _show_schedule(ctx, ctx.client.resume_schedule(args.queue, schedule_id))


def schedules_delete(ctx: Context) -> int:
    args = ctx.args
    schedule_id = _schedule(ctx, args.queue, args.schedule)
    if not ctx.confirm(f"Delete schedule {args.schedule} of queue {args.queue}?"):
        return 1
    ctx.client.delete_schedule(args.queue, schedule_id)
    if not ctx.as_json:
        ctx.say(f"deleted schedule {args.schedule}")
    return 0


# --- messages ----------------------------------------------------------------------------


def messages_send(ctx: Context) -> int:
    args = ctx.args
    payload = ctx.stdin.read() if args.payload == "-" else args.payload
    sent = ctx.client.enqueue(
        args.queue,
        payload,
        priority=args.priority,
        ttl_seconds=args.ttl,
        delay_seconds=args.delay,
        group=args.group,
        idempotency_key=args.idempotency_key,
    )
    if ctx.as_json:
        ctx.raw()
    else:
        ctx.say(sent.id + (" (replayed: already enqueued with this key)" if sent.replayed else ""))
    return 0


def _message_row(message: StoredMessage) -> Sequence[Any]:
    return (
        message.id,
        str(message.priority),
        str(message.state),
        message.group,
        message.delivery_attempts,
        message.enqueued_at,
        message.available_at,
        shorten(message.payload),
    )


def messages_browse(ctx: Context) -> int:
    args = ctx.args
    return _listing(
        ctx,
        lambda c: ctx.client.list_messages(
            args.queue,
            state=args.state,
            priority=args.priority,
            group=args.group,
            match=args.match,
            limit=args.limit,
            cursor=c,
        ),
        ["ID", "PRIORITY", "STATE", "GROUP", "ATTEMPTS", "ENQUEUED", "AVAILABLE", "PAYLOAD"],
        _message_row,
    )


def _timeline(ctx: Context, attempts: Sequence[Attempt]) -> None:
    """A message's attempts, oldest first: who had it, when, how it ended, and why."""
    if not attempts:
        ctx.say("attempts: (none yet)")
        return
    rows = [
        (
            attempt.number,
            attempt.delivered_at,
            attempt.consumer,
            attempt.ended_at,
            str(attempt.outcome),
            attempt.error,
        )
        for attempt in attempts
    ]
    ctx.say("attempts:")
    ctx.say(table(["#", "DELIVERED", "CONSUMER", "ENDED", "OUTCOME", "ERROR"], rows))


def messages_show(ctx: Context) -> int:
    message = ctx.client.get_message(ctx.args.queue, ctx.args.id)
    if ctx.as_json:
        ctx.raw()
        return 0
    pairs: list[tuple[str, Any]] = [
        ("id", message.id),
        ("priority", str(message.priority)),
        ("state", str(message.state)),
        ("group", message.group),
        ("delivery_attempts", message.delivery_attempts),
        ("enqueued_at", message.enqueued_at),
        ("available_at", message.available_at),
        ("expires_at", message.expires_at),
        ("last_delivered_at", message.last_delivered_at),
        ("redriven_from", message.redriven_from),
        ("schedule_id", message.schedule_id),
    ]
    if message.completed_at is not None:
        pairs.append(("completed_at", message.completed_at))
    ctx.say(fields(pairs))
    _timeline(ctx, message.attempts)
    if message.result is not None:
        ctx.say("result:\n" + _pretty_payload(message.result))
    ctx.say("payload:\n" + _pretty_payload(message.payload))
    return 0


def _described(args: argparse.Namespace, names: Sequence[str]) -> str:
    """The filters given, as a sentence's tail."""
    given = []
    for name in names:
        value = getattr(args, name, None)
        if value is None:
            continue
        text = msgspec.json.encode(value).decode() if name == "match" else str(value)
        given.append(f"{name}={text}")
    return f" matching {', '.join(given)}" if given else ""


def _bulk(
    ctx: Context, run: Callable[[bool], int], what: str, verb: str, done: str, where: str
) -> int:
    """A bulk action: with --dry-run only the count; otherwise, unless --yes, the dry run's
    count first and a [y/N] question, then the real run (which takes what matches then)."""
    args = ctx.args
    if args.dry_run or not args.yes:
        matched = run(True)
        if args.dry_run:
            if ctx.as_json:
                ctx.raw()
            else:
                ctx.say(f"{matched} {what}{where} (dry run: nothing was changed)")
            return 0
        if matched == 0:
            print(f"no {what}{where}: nothing to do", file=ctx.err)
            if ctx.as_json:
                ctx.raw()
            return 0
        if not ctx.confirm(f"{verb} {matched} {what}{where}?"):
            return 1
    count = run(False)
    if ctx.as_json:
        ctx.raw()
    else:
        ctx.say(f"{done} {count} {what}")
    return 0


_MESSAGE_FILTERS = ("state", "priority", "group", "match")


def messages_delete(ctx: Context) -> int:
    args = ctx.args
    bulk = args.all or any(getattr(args, name) is not None for name in _MESSAGE_FILTERS)
    if args.id is not None:
        if bulk or args.dry_run or args.limit is not None:
            print("error: give a message ID, or filters / --all for a bulk delete", file=ctx.err)
            return 2
        if not ctx.confirm(f"Delete message {args.id} from queue {args.queue}?"):
            return 1
        ctx.client.delete_message(args.queue, args.id)
        if not ctx.as_json:
            ctx.say(f"deleted message {args.id}")
        return 0
    if not bulk:
        print(
            "error: give a message ID, or --state/--priority/--group/--match (or --all) "
            "to delete in bulk",
            file=ctx.err,
        )
        return 2
    scope = "message(s)" if args.state == "completed" else "live message(s)"
    return _bulk(
        ctx,
        lambda dry: ctx.client.delete_messages(
            args.queue,
            state=args.state,
            priority=args.priority,
            group=args.group,
            match=args.match,
            limit=args.limit,
            dry_run=dry,
        ),
        scope,
        "Delete",
        "deleted",
        f" of queue {args.queue}{_described(args, _MESSAGE_FILTERS)}",
    )


# --- groups ------------------------------------------------------------------------------


def groups_list(ctx: Context) -> int:
    args = ctx.args

    def row(group: Group) -> Sequence[Any]:
        return (
            group.group,
            str(group.state),
            group.ready,
            group.in_flight,
            group.delayed,
            group.head_delivery_attempts,
            group.head_enqueued_at,
            group.last_delivered_at,
            group.head_id,
        )

    return _listing(
        ctx,
        lambda c: ctx.client.list_groups(args.queue, state=args.state, limit=args.limit, cursor=c),
        [
            "GROUP",
            "STATE",
            "READY",
            "IN_FLIGHT",
            "DELAYED",
            "HEAD_ATTEMPTS",
            "HEAD_ENQUEUED",
            "LAST_DELIVERED",
            "HEAD_ID",
        ],
        row,
    )


# --- dead letters ------------------------------------------------------------------------


def _dead_letter_row(record: DeadLetter) -> Sequence[Any]:
    return (
        record.id,
        str(record.priority),
        record.group,
        record.delivery_attempts,
        record.dead_lettered_at,
        record.reason,
        shorten(record.last_error or "", 30) or None,
        shorten(record.payload),
    )


def dead_letters_list(ctx: Context) -> int:
    args = ctx.args
    return _listing(
        ctx,
        lambda c: ctx.client.list_dead_letters(
            args.queue, group=args.group, match=args.match, limit=args.limit, cursor=c
        ),
        ["ID", "PRIORITY", "GROUP", "ATTEMPTS", "DEAD_LETTERED", "REASON", "LAST_ERROR", "PAYLOAD"],
        _dead_letter_row,
    )


def dead_letters_show(ctx: Context) -> int:
    record = ctx.client.get_dead_letter(ctx.args.queue, ctx.args.id)
    if ctx.as_json:
        ctx.raw()
        return 0
    ctx.say(
        fields(
            [
                ("id", record.id),
                ("priority", str(record.priority)),
                ("delivery_attempts", record.delivery_attempts),
                ("enqueued_at", record.enqueued_at),
                ("last_delivered_at", record.last_delivered_at),
                ("dead_lettered_at", record.dead_lettered_at),
                ("reason", record.reason),
                ("group", record.group),
                ("last_error", record.last_error),
            ]
        )
    )
    _timeline(ctx, record.attempts)
    ctx.say("payload:\n" + _pretty_payload(record.payload))
    return 0


_DEAD_LETTER_FILTERS = ("priority", "group", "match", "reason")


def _dead_letter_bulk(ctx: Context, single: str) -> bool | None:
    """Whether the command is a bulk action (None: a usage error, printed)."""
    args = ctx.args
    filtered = any(getattr(args, name) is not None for name in _DEAD_LETTER_FILTERS)
    bulk = bool(args.all or filtered)
    if args.id is not None:
        if bulk or args.dry_run or args.limit is not None:
            print(f"error: give a dead-letter ID, or filters / --all {single}", file=ctx.err)
            return None
        return False
    if not bulk:
        print(
            f"error: give a dead-letter ID, or --all / --priority/--group/--match/--reason "
            f"{single}",
            file=ctx.err,
        )
        return None
    return True


def dead_letters_redrive(ctx: Context) -> int:
    args = ctx.args
    bulk = _dead_letter_bulk(ctx, "to redrive in bulk (oldest first, at most --limit)")
    if bulk is None:
        return 2
    if not bulk:
        new_id = ctx.client.redrive_dead_letter(args.queue, args.id)
        if ctx.as_json:
            ctx.raw()
        else:
            ctx.say(f"redriven as message {new_id}")
        return 0
    return _bulk(
        ctx,
        lambda dry: ctx.client.redrive_dead_letters(
            args.queue,
            limit=args.limit,
            priority=args.priority,
            group=args.group,
            match=args.match,
            reason=args.reason,
            dry_run=dry,
        ),
        "dead letter(s)",
        "Redrive (oldest first)",
        "redriven",
        f" of queue {args.queue}{_described(args, _DEAD_LETTER_FILTERS)}",
    )


def dead_letters_delete(ctx: Context) -> int:
    args = ctx.args
    bulk = _dead_letter_bulk(ctx, "to delete in bulk")
    if bulk is None:
        return 2
    if bulk:
        return _bulk(
            ctx,
            lambda dry: ctx.client.delete_dead_letters(
                args.queue,
                priority=args.priority,
                group=args.group,
                match=args.match,
                reason=args.reason,
                limit=args.limit,
                dry_run=dry,
            ),
            "dead letter(s)",
            "Delete",
            "deleted",
            f" of queue {args.queue}{_described(args, _DEAD_LETTER_FILTERS)}",
        )
    if not ctx.confirm(f"Delete dead letter {args.id} of queue {args.queue}?"):
        return 1
    ctx.client.delete_dead_letter(args.queue, args.id)
    if not ctx.as_json:
        ctx.say(f"deleted dead letter {args.id}")
    return 0


# --- consumers, audit, history -----------------------------------------------------------


def consumers(ctx: Context) -> int:
    args = ctx.args

    def row(consumer: Consumer) -> Sequence[Any]:
        return (
            consumer.queue_name,
            consumer.name,
            str(consumer.health),
            consumer.deliveries,
            consumer.last_seen_at,
            consumer.first_seen_at,
        )

    return _listing(
        ctx,
        lambda c: ctx.client.list_consumers(
            queue=args.queue, health=args.health, limit=args.limit, cursor=c
        ),
        ["QUEUE", "NAME", "HEALTH", "DELIVERIES", "LAST_SEEN", "FIRST_SEEN"],
        row,
    )


def audit(ctx: Context) -> int:
    args = ctx.args

    def row(entry: AuditEntry) -> Sequence[Any]:
        details = msgspec.json.encode(entry.details).decode() if entry.details else ""
        return (
            entry.at,
            entry.actor,
            entry.action,
            f"{entry.target_type}:{entry.target_id}",
            shorten(details, 60),
        )

    return _listing(
        ctx,
        lambda c: ctx.client.list_audit_log(
            queue=args.queue, action=args.action, limit=args.limit, cursor=c
        ),
        ["AT", "ACTOR", "ACTION", "TARGET", "DETAILS"],
        row,
    )


def history(ctx: Context) -> int:
    result = ctx.client.queue_history(ctx.args.queue, minutes=ctx.args.minutes)
    if ctx.as_json:
        ctx.raw()
        return 0

    def row(point: HistoryPoint) -> Sequence[Any]:
        return (
            point.at,
            point.ready,
            point.in_flight,
            point.delayed,
            point.dead_letters,
            point.enqueued,
            point.delivered,
            point.acknowledged,
            point.dead_lettered,
            point.expired,
        )

    headers = [
        "AT",
        "READY",
        "IN_FLIGHT",
        "DELAYED",
        "DEAD",
        "ENQUEUED",
        "DELIVERED",
        "ACKED",
        "DEAD_LETTERED",
        "EXPIRED",
    ]
    rows = [row(point) for point in result.points]
    ctx.say(f"interval: {result.interval_seconds}s")
    ctx.say(table(headers, rows) if rows else "(no snapshots yet)")
    return 0


# --- the parser --------------------------------------------------------------------------


def _output_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the API's JSON answer instead of a table",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    common = [connection_options(suppress=True), _output_options()]
    parser = argparse.ArgumentParser(
        prog="retsuctl",
        description="Operate Retsu over its HTTP API. A queue is named by name or id. "
        + CONNECTION_HELP,
        parents=common,
    )
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")

    def command(
        sub: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        handler: Command,
        help_text: str,
        aliases: Sequence[str] = (),
    ) -> argparse.ArgumentParser:
        cmd = sub.add_parser(
            name, help=help_text, description=help_text, parents=common, aliases=list(aliases)
        )
        cmd.set_defaults(handler=handler)
        return cmd

    def yes(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    def paging(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--limit", type=int, help="items per page (1-100, default 50)")
        cmd.add_argument("--cursor", help="the next_cursor of a previous page")
        cmd.add_argument("--all", action="store_true", help="follow every page (tables only)")

    def settings(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--visibility-timeout", type=int, metavar="SECONDS")
        cmd.add_argument("--max-attempts", type=int, metavar="N")
        cmd.add_argument("--ttl", type=int, metavar="SECONDS", help="default message lifetime")
        # Flow control (SPEC §3.10) and history (§3.11). UNSET: not given (an update leaves
        # the setting as it is); "none" removes a limit.
        cmd.add_argument(
            "--group-max-in-flight",
            type=int,
            metavar="N",
            help="messages of one group leased at once (1: each group an ordered lane)",
        )
        cmd.add_argument(
            "--max-in-flight",
            type=_count_or_none,
            default=UNSET,
            metavar="N|none",
            help="active leases of the queue at most (none: no cap)",
        )
        cmd.add_argument(
            "--rate-limit",
            type=_rate_limit,
            default=UNSET,
            metavar="PER_SECOND[:BURST]|none",
            help="a token bucket for the queue's deliveries (none: no limit)",
        )
        cmd.add_argument(
            "--group-rate-limit",
            type=_rate_limit,
            default=UNSET,
            metavar="PER_SECOND[:BURST]|none",
            help="the same bucket for each group on its own (none: no limit)",
        )
        cmd.add_argument(
            "--completed-retention",
            type=int,
            metavar="SECONDS",
            help="keep acknowledged messages (with their result) this long (0: not at all)",
        )

    def match(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument(
            "--match",
            type=_json_object,
            metavar="JSON",
            help="only JSON payloads containing this object, e.g. '{\"customer\": 42}'",
        )

    def bulk(cmd: argparse.ArgumentParser, limit_help: str) -> None:
        cmd.add_argument("--all", action="store_true", help="in bulk, without a filter")
        cmd.add_argument("--limit", type=int, help=limit_help)
        cmd.add_argument(
            "--dry-run", action="store_true", help="only count what a real run would take now"
        )

    queues = groups.add_parser("queues", help="list, inspect and change queues")
    qsub = queues.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd = command(qsub, "list", queues_list, "list queues by name")
    cmd.add_argument("--name", help="only the queue with exactly this name")
    cmd.add_argument("--stats", action="store_true", help="add each queue's counts")
    paging(cmd)
    cmd = command(qsub, "show", queues_show, "a queue's settings and exact counts")
    cmd.add_argument("queue")
    cmd = command(qsub, "create", queues_create, "create a queue")
    cmd.add_argument("name")
    settings(cmd)
    cmd = command(qsub, "update", queues_update, "change a queue's settings")
    cmd.add_argument("queue")
    settings(cmd)
    command(qsub, "pause", queues_pause, "stop deliveries").add_argument("queue")
    command(qsub, "resume", queues_resume, "resume deliveries").add_argument("queue")
    cmd = command(qsub, "purge", queues_purge, "remove every live message (not dead letters)")
    cmd.add_argument("queue")
    yes(cmd)
    cmd = command(qsub, "delete", queues_delete, "delete a queue, its messages and dead letters")
    cmd.add_argument("queue")
    yes(cmd)

    messages = groups.add_parser("messages", help="send, browse and delete messages")
    msub = messages.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd = command(msub, "send", messages_send, "enqueue one message")
    cmd.add_argument("queue")
    cmd.add_argument("payload", help="the payload text, or - to read it from stdin")
    cmd.add_argument("--priority", choices=PRIORITIES, default="MEDIUM")
    cmd.add_argument("--ttl", type=int, metavar="SECONDS")
    cmd.add_argument("--delay", type=int, metavar="SECONDS")
    cmd.add_argument("--group", help="the message's group (an ordered lane of the queue)")
    cmd.add_argument("--idempotency-key", metavar="KEY")
    cmd = command(
        msub,
        "browse",
        messages_browse,
        "list messages without claiming them (also: messages list)",
        aliases=["list"],
    )
    cmd.add_argument("queue")
    cmd.add_argument("--state", choices=STATES, help="completed: acknowledged and kept")
    cmd.add_argument("--priority", choices=PRIORITIES)
    cmd.add_argument("--group", help="only this group")
    match(cmd)
    paging(cmd)
    cmd = command(
        msub, "show", messages_show, "one message: its attempts timeline, result and payload"
    )
    cmd.add_argument("queue")
    cmd.add_argument("id")
    cmd = command(
        msub,
        "delete",
        messages_delete,
        "delete a message by ID, or in bulk by --state/--priority/--group/--match (or --all)",
    )
    cmd.add_argument("queue")
    cmd.add_argument("id", nargs="?")
    cmd.add_argument("--state", choices=STATES)
    cmd.add_argument("--priority", choices=PRIORITIES)
    cmd.add_argument("--group")
    match(cmd)
    bulk(cmd, "in bulk: at most this many (1-100000, default 1000)")
    yes(cmd)

    cmd = command(
        groups,
        "groups",
        groups_list,
        "a queue's groups: the one whose head waited longest first",
    )
    cmd.add_argument("queue")
    cmd.add_argument("--state", choices=GROUP_STATES)
    paging(cmd)

    dead = groups.add_parser("dead-letters", help="inspect, redrive and delete dead letters")
    dsub = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd = command(dsub, "list", dead_letters_list, "list dead letters, newest first")
    cmd.add_argument("queue")
    cmd.add_argument("--group", help="only this group")
    match(cmd)
    paging(cmd)
    cmd = command(dsub, "show", dead_letters_show, "one dead letter")
    cmd.add_argument("queue")
    cmd.add_argument("id")

    def dead_filters(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--priority", choices=PRIORITIES)
        cmd.add_argument("--group")
        match(cmd)
        cmd.add_argument("--reason", help="e.g. MAX_DELIVERY_ATTEMPTS_EXHAUSTED")

    cmd = command(
        dsub,
        "redrive",
        dead_letters_redrive,
        "put dead letters back on the queue: one by ID, or in bulk (oldest first) by "
        "--priority/--group/--match/--reason or --all",
    )
    cmd.add_argument("queue")
    cmd.add_argument("id", nargs="?")
    dead_filters(cmd)
    bulk(cmd, "in bulk: at most this many (1-1000, default 100)")
    yes(cmd)
    cmd = command(
        dsub,
        "delete",
        dead_letters_delete,
        "delete a dead letter by ID, or in bulk by --priority/--group/--match/--reason or --all",
    )
    cmd.add_argument("queue")
    cmd.add_argument("id", nargs="?")
    dead_filters(cmd)
    bulk(cmd, "in bulk: at most this many (1-100000, default 1000)")
    yes(cmd)

    schedules = groups.add_parser("schedules", help="recurring messages of a queue")
    ssub = schedules.add_subparsers(dest="action", required=True, metavar="ACTION")
    cmd = command(ssub, "list", schedules_list, "a queue's schedules by name")
    cmd.add_argument("queue")
    paging(cmd)
    cmd = command(ssub, "show", schedules_show, "one schedule (by id or name)")
    cmd.add_argument("queue")
    cmd.add_argument("schedule")
    cmd = command(
        ssub,
        "create",
        schedules_create,
        "a recurring message: --cron EXPR (in --timezone) or --every SECONDS",
    )
    cmd.add_argument("queue")
    cmd.add_argument("name")
    when = cmd.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help='five fields, e.g. "30 2 * * *"')
    when.add_argument("--every", type=int, metavar="SECONDS", help="an interval (1-2592000)")
    cmd.add_argument("--timezone", metavar="ZONE", help="IANA name for --cron (default UTC)")
    cmd.add_argument("--payload", required=True, help="the payload text, or - to read stdin")
    cmd.add_argument("--priority", choices=PRIORITIES, default="MEDIUM")
    cmd.add_argument("--ttl", type=int, metavar="SECONDS", help="each message's lifetime")
    cmd.add_argument("--group", help="each message's group")
    cmd.add_argument("--paused", action="store_true", help="create it paused")
    cmd = command(ssub, "pause", schedules_pause, "skip a schedule's due times until resumed")
    cmd.add_argument("queue")
    cmd.add_argument("schedule")
    yes(cmd)
    cmd = command(ssub, "resume", schedules_resume, "resume a schedule (due times from now)")
    cmd.add_argument("queue")
    cmd.add_argument("schedule")
    cmd = command(ssub, "delete", schedules_delete, "delete a schedule (its messages stay)")
    cmd.add_argument("queue")
    cmd.add_argument("schedule")
    yes(cmd)

    cmd = command(groups, "consumers", consumers, "who consumes, and how recently")
    cmd.add_argument("--queue")
    cmd.add_argument("--health", choices=HEALTH)
    paging(cmd)
    cmd = command(groups, "audit", audit, "the audit log, newest first")
    cmd.add_argument("--queue")
    cmd.add_argument("--action")
    paging(cmd)
    cmd = command(groups, "history", history, "a queue's depth and throughput over time")
    cmd.add_argument("queue")
    cmd.add_argument("--minutes", type=int, help="how far back (1-10080, default 60)")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    transport: httpx.BaseTransport | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``retsuctl``; ``transport`` (tests) replaces the network."""
    args = build_parser().parse_args(argv)
    out, err = stdout or sys.stdout, stderr or sys.stderr
    recorder = Recorder(transport)
    client = Client(
        getattr(args, "url", None),
        token=getattr(args, "token", None),
        timeout=getattr(args, "timeout", 10.0),
        transport=recorder,
    )
    ctx = Context(client, recorder, args, out, err, stdin or sys.stdin)
    try:
        with client:
            return int(args.handler(ctx))
    except RetsuError as error:
        print_error(error, as_json=ctx.as_json, err=err)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130


if __name__ == "__main__":
    sys.exit(main())
