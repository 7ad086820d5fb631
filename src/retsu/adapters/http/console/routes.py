"""The console's pages and forms (SPEC §3.9).

Every handler takes the same services as the JSON routes (``adapters/http/routes``), lists
through the same pages (``adapters/http/pages.py``, and ``lists.py`` for the searchable
ones) and builds the same commands with the same ``caller``: the rules, the audit rows and
the errors are the API's. A form answers with a ``303`` to the page that shows the result
(post/redirect/get), with a short notice in the address (``notices.py``). Every action
that destroys something is a ``GET`` confirmation page first, saying what it will do and to
how many, and a ``POST`` from that page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final
from urllib.parse import urlencode
from uuid import UUID

from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import PathParameter, QueryParameter
from litestar.response import Template
from markupsafe import Markup

from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.console.bulk import ROUTES as BULK_ROUTES
from retsu.adapters.http.console.charts import Series, line_chart, sparkline
from retsu.adapters.http.console.forms import SECTIONS, SettingsForm
from retsu.adapters.http.console.gate import (
    PUBLIC,
    ROOT,
    ConsoleContext,
    page,
    refused,
    safe_next,
    see_other,
)
from retsu.adapters.http.console.lifecycle import ROUTES as LIFECYCLE_ROUTES
from retsu.adapters.http.console.lists import (
    SearchForm,
    parse_priority,
    parse_state,
)
from retsu.adapters.http.console.notices import notice_text
from retsu.adapters.http.console.notices import queue_path as _queue_path
from retsu.adapters.http.console.schedules import ROUTES as SCHEDULE_ROUTES
from retsu.adapters.http.console.session import ConsoleSessions
from retsu.adapters.http.dependencies import (
    Activity,
    Browsing,
    Cursors,
    DeadLetters,
    Health,
    Queues,
)
from retsu.adapters.http.pages import (
    audit_log_page,
    consumers_page,
    dead_letters_found,
    groups_found,
    messages_found,
    queues_page,
)
from retsu.application.activity import ActivityService, QueueHistoryQuery, QueueSummary
from retsu.application.browsing import DeleteMessageCommand
from retsu.application.dead_letters import DeadLetterCommand
from retsu.application.queues import (
    QueueCommand,
    QueueService,
    QueueWithStats,
    UpdateQueueCommand,
)
from retsu.domain.audit import AuditAction
from retsu.domain.browsing import BrowseState
from retsu.domain.consumer import ConsumerHealth
from retsu.domain.errors import InvalidInput
from retsu.domain.groups import GroupState
from retsu.domain.history import History
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT
from retsu.domain.queue import Queue
from retsu.domain.search import BULK_LIMIT, DEFAULT_BULK_LIMIT

PAGE_SIZE: Final = 50
# How many queues the audit log's queue filter offers by name.
QUEUE_CHOICES: Final = 100

Ctx = NamedDependency[ConsoleContext]
# Parameters as the console reads them: ids in the path (canonical UUIDs, checked by the
# API's request rules), free text in the query (each use case validates its own).
PathId = Annotated[UUID, PathParameter()]
Text = Annotated[str | None, QueryParameter()]
# ``state`` is a name Litestar keeps for itself: the parameter takes another.
StateText = Annotated[str | None, QueryParameter(name="state")]


def _live_messages(found: QueueWithStats) -> int:
    stats = found.stats
    return stats.ready + stats.in_flight + stats.delayed


# -- overview ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueRow:
    queue: Queue
    found: QueueSummary
    healthy_consumers: int
    depth: Markup | None = None
    throughput: Markup | None = None


SPARK_MINUTES: Final = 60


def _depth(history: History) -> list[Series]:
    points = history.points
    return [
        Series("ready", "Ready", [p.ready for p in points]),
        Series("in_flight", "In flight", [p.in_flight for p in points]),
        Series("delayed", "Delayed", [p.delayed for p in points]),
        Series("dead_letters", "Dead letters", [p.dead_letters for p in points]),
    ]


def _throughput(history: History) -> list[Series]:
    points = history.points
    return [
        Series("enqueued", "Enqueued", [p.counts.enqueued for p in points]),
        Series("delivered", "Delivered", [p.counts.delivered for p in points]),
        Series("acknowledged", "Acknowledged", [p.counts.acknowledged for p in points]),
        Series("dead_lettered", "Dead-lettered", [p.counts.dead_lettered for p in points]),
        Series("expired", "Expired", [p.counts.expired for p in points]),
    ]


async def _overview(
    queues: QueueService,
    activity: ActivityService,
    cursors: Cursors,
    cursor: str | None,
) -> tuple[list[QueueRow], str | None]:
    """A page of queues at a glance, in a bounded number of reads whatever the page holds
    (the queues, their states, their healthy consumers, their histories)."""
    listed = await queues_page(queues, cursors, limit=PAGE_SIZE, cursor=cursor)
    rows: list[QueueRow] = []
    for summary in await activity.summaries(listed.items, minutes=SPARK_MINUTES):
        queue, history = summary.queue, summary.history
        depth = _depth(history)[:1]  # ready: the depth that matters at a glance
        flow = _throughput(history)[:3:2]  # enqueued and acknowledged: in and out
        rows.append(
            QueueRow(
                queue,
                summary,
                summary.healthy_consumers,
                sparkline(depth, label=f"{queue.name}: ready messages, last hour")
                if history.points
                else None,
                sparkline(flow, label=f"{queue.name}: enqueued and acknowledged, last hour")
                if history.points
                else None,
            )
        )
    return rows, listed.next_cursor


@get("/", name="console:overview")
async def overview(
    ctx: Ctx,
    queues: Queues,
    activity: Activity,
    cursors: Cursors,
    database_health: Health,
    cursor: Text = None,
    notice: Text = None,
    name: Text = None,
) -> Template:
    rows, next_cursor = await _overview(queues, activity, cursors, cursor)
    # SPEC §10: a banner naming whatever has held back vacuum for more than 5 minutes.
    horizon = await database_health.horizon_warning()
    return page(
        ctx,
        "overview.html",
        rows=rows,
        next_cursor=next_cursor,
        cursor=cursor,
        horizon=horizon,
        notice=notice_text(notice, name=name),
    )


@get("/fragments/overview")
async def overview_fragment(
    ctx: Ctx,
    queues: Queues,
    activity: Activity,
    cursors: Cursors,
    cursor: Text = None,
) -> Template:
    """The overview's table alone: what the live refresh swaps in every 5 s."""
    rows, next_cursor = await _overview(queues, activity, cursors, cursor)
    return page(ctx, "_overview_table.html", rows=rows, next_cursor=next_cursor, cursor=cursor)


# -- one queue: settings, pause / resume, purge ------------------------------------------


WINDOWS: Final = (("1h", "1 h", 60), ("24h", "24 h", 1440), ("7d", "7 d", 10080))


@dataclass(frozen=True, slots=True)
class Charts:
    depth: Markup
    throughput: Markup
    interval: int
    points: int
    # The start of the x axis: the window's, or the first snapshot's when the history is
    # younger than the window (a young queue's chart spans the minutes it has, not an empty
    # hour with a line squeezed against its right edge).
    start: datetime
    end: datetime
    # The history covers less than the window (``start`` is the first snapshot).
    partial: bool

    @property
    def collecting(self) -> bool:
        """Too little to draw: a line needs two snapshots."""
        return self.points < 2

    @property
    def covered_seconds(self) -> float:
        return (self.end - self.start).total_seconds()


async def _charts(activity: Activity, queue: Queue, window: str) -> Charts:
    minutes = next((m for key, _, m in WINDOWS if key == window), 60)
    history = await activity.history(QueueHistoryQuery(queue.id, minutes))
    end = history.until or datetime.now(UTC)
    window_start = history.since or end - timedelta(minutes=minutes)
    times = [point.at for point in history.points]
    interval = history.interval_seconds
    # Snapshots reach back to the window's start give or take one interval: the whole
    # window. Else the axis starts at the first snapshot.
    partial = bool(times) and times[0] - window_start > timedelta(seconds=max(interval, 1) * 2)
    start = times[0] if partial else window_start
    return Charts(
        depth=line_chart(
            times,
            _depth(history),
            start=start,
            end=end,
            interval_seconds=interval,
            label=f"{queue.name}: depth over {window}",
        ),
        throughput=line_chart(
            times,
            _throughput(history),
            start=start,
            end=end,
            interval_seconds=interval,
            label=f"{queue.name}: throughput over {window}",
        ),
        interval=history.interval_seconds,
        points=len(history.points),
        start=start,
        end=end,
        partial=partial,
    )


async def _queue_page(
    ctx: ConsoleContext,
    found: QueueWithStats,
    activity: Activity,
    *,
    window: str | None = None,
    form: SettingsForm | None = None,
    notice: str | None = None,
    status: int = 200,
) -> Template:
    window = window if window in {key for key, _, _ in WINDOWS} else "1h"
    return page(
        ctx,
        "queue.html",
        status=status,
        queue=found.queue,
        stats=found.stats,
        form=form or SettingsForm.of(found.queue),
        sections=SECTIONS,
        notice=notice,
        charts=await _charts(activity, found.queue, window),
        window=window,
        window_label=next(label for key, label, _ in WINDOWS if key == window),
        windows=[(key, label) for key, label, _ in WINDOWS],
        depth_series=_depth(History(0, [])),
        throughput_series=_throughput(History(0, [])),
        tab="queue",
    )


@get("/queues/{queue_id:str}")
async def queue_page(
    ctx: Ctx,
    queue_id: PathId,
    queues: Queues,
    activity: Activity,
    window: Text = None,
    notice: Text = None,
    n: Text = None,
    name: Text = None,
) -> Template:
    found = await queues.get(queue_id)
    return await _queue_page(
        ctx, found, activity, window=window, notice=notice_text(notice, n, name=name)
    )


@post("/queues/{queue_id:str}/settings")
async def save_settings(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
    activity: Activity,
) -> Response[Any]:
    found = await queues.get(queue_id)
    form = SettingsForm.submitted(await request.form())
    changes = form.changes(found.queue)
    if not form.errors:
        if not changes:
            return see_other(ctx, _queue_path(queue_id, notice="unchanged"))
        try:
            await queues.update(
                UpdateQueueCommand(queue_id=queue_id, caller=caller_of(request), **changes)
            )
        except InvalidInput as error:
            form.fail(error.code, error.detail)
    if form.errors:
        return await _queue_page(ctx, found, activity, form=form, status=400)
    return see_other(ctx, _queue_path(queue_id, notice="saved"))


@post("/queues/{queue_id:str}/pause")
async def pause(
    ctx: Ctx, request: Request[Any, Any, Any], queue_id: PathId, queues: Queues
) -> Response[Any]:
    await queues.pause(QueueCommand(queue_id, caller_of(request)))
    return see_other(ctx, _queue_path(queue_id, notice="paused"))


@post("/queues/{queue_id:str}/resume")
async def resume(
    ctx: Ctx, request: Request[Any, Any, Any], queue_id: PathId, queues: Queues
) -> Response[Any]:
    await queues.resume(QueueCommand(queue_id, caller_of(request)))
    return see_other(ctx, _queue_path(queue_id, notice="resumed"))


@get("/queues/{queue_id:str}/purge")
async def confirm_purge(ctx: Ctx, queue_id: PathId, queues: Queues) -> Template:
    found = await queues.get(queue_id)
    return page(ctx, "purge.html", queue=found.queue, stats=found.stats, live=_live_messages(found))


@post("/queues/{queue_id:str}/purge")
async def purge(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
) -> Response[Any]:
    found = await queues.get(queue_id)
    typed = str((await request.form()).get("confirm_name", "")).strip()
    if typed != found.queue.name:
        return page(
            ctx,
            "purge.html",
            status=400,
            queue=found.queue,
            stats=found.stats,
            live=_live_messages(found),
            error=f"Type the queue's name, {found.queue.name}, to confirm. Nothing was purged.",
            typed=typed,
        )
    purged = await queues.purge(QueueCommand(queue_id, caller_of(request)))
    return see_other(ctx, _queue_path(queue_id, notice="purged", n=purged))


# -- the message browser (SPEC §3.6, §3.11) ------------------------------------------------

STATES: Final = (
    ("", "All live"),
    ("ready", "Ready"),
    ("in_flight", "In flight"),
    ("delayed", "Delayed"),
    ("completed", "Completed"),
)
PRIORITIES: Final = ("", "HIGH", "MEDIUM", "LOW")


def _with_query(path: str, params: dict[str, str]) -> str:
    given = {k: v for k, v in params.items() if v}
    return path + ("?" + urlencode(given) if given else "")


@get("/queues/{queue_id:str}/messages")
async def messages(
    ctx: Ctx,
    queue_id: PathId,
    queues: Queues,
    browsing: Browsing,
    cursors: Cursors,
    message_state: StateText = None,
    priority: Text = None,
    group: Text = None,
    match: Text = None,
    cursor: Text = None,
    notice: Text = None,
    n: Text = None,
    of: Text = None,
) -> Template:
    found = await queues.get(queue_id)
    # An empty filter (the "all" choice of a form) means no filter; anything else is
    # judged as the API judges it (invalid_state, invalid_priority, invalid_cursor). The
    # search fields' errors (invalid_group, invalid_match) are shown next to the fields.
    state = parse_state(message_state)
    wanted_priority = parse_priority(priority)
    search = SearchForm.read(group, match)
    filters = {
        "state": message_state or "",
        "priority": priority or "",
        **search.params(),
    }
    items, next_cursor = [], None
    if search.valid:
        listed = await messages_found(
            browsing,
            cursors,
            queue_id,
            state,
            search.search(wanted_priority),
            PAGE_SIZE,
            cursor or None,
        )
        items, next_cursor = listed.items, listed.next_cursor
    base = _queue_path(queue_id, "/messages")
    here = _with_query(base, {**filters, "cursor": cursor or ""})
    return page(
        ctx,
        "messages.html",
        status=200 if search.valid else 400,
        queue=found.queue,
        stats=found.stats,
        items=items,
        next_cursor=next_cursor,
        cursor=cursor,
        state=filters["state"],
        priority=filters["priority"],
        search=search,
        filters=filters,
        states=STATES,
        priorities=PRIORITIES,
        here=here,
        bulk_delete=_with_query(base + "/delete", filters),
        notice=notice_text(notice, n, of=of),
        tab="messages",
    )


def _messages_list(queue_id: UUID, back: object) -> str:
    """The message list to go back to: the one given (filters, page) if it is this queue's
    list, else the plain list."""
    target = safe_next(back)
    plain = _queue_path(queue_id, "/messages")
    return target if target == plain or target.startswith(plain + "?") else plain


@get("/queues/{queue_id:str}/messages/{message_id:str}")
async def message(
    ctx: Ctx,
    queue_id: PathId,
    message_id: PathId,
    queues: Queues,
    browsing: Browsing,
    back: Text = None,
) -> Template:
    found = await queues.get(queue_id)
    item = await browsing.get(queue_id, message_id)
    retention = found.queue.settings.completed_retention_seconds
    completed = item.state is BrowseState.COMPLETED
    return page(
        ctx,
        "message.html",
        queue=found.queue,
        item=item,
        completed=completed,
        kept_until=(
            item.completed_at + timedelta(seconds=retention)
            if completed and item.completed_at is not None and retention
            else None
        ),
        back=_messages_list(queue_id, back),
        tab="messages",
    )


@get("/queues/{queue_id:str}/messages/{message_id:str}/delete")
async def confirm_delete_message(
    ctx: Ctx,
    queue_id: PathId,
    message_id: PathId,
    queues: Queues,
    browsing: Browsing,
    back: Text = None,
) -> Template:
    found = await queues.get(queue_id)
    item = await browsing.get(queue_id, message_id)
    return page(
        ctx,
        "message_delete.html",
        queue=found.queue,
        item=item,
        back=_messages_list(queue_id, back),
    )


@post("/queues/{queue_id:str}/messages/{message_id:str}/delete")
async def delete_message(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    message_id: PathId,
    browsing: Browsing,
) -> Response[Any]:
    await browsing.delete(
        DeleteMessageCommand(queue_id=queue_id, message_id=message_id, caller=caller_of(request))
    )
    # Back to the list the delete came from (its filters and page), with the notice.
    back = _messages_list(queue_id, (await request.form()).get("back"))
    separator = "&" if "?" in back else "?"
    return see_other(ctx, f"{back}{separator}notice=message_deleted")


# -- groups (SPEC §3.10) -------------------------------------------------------------------

GROUP_STATES: Final = (("", "All"), *((s.value, s.value.capitalize()) for s in GroupState))
# A head delivered this many times (or on its last allowed attempt) stands out: its lane
# waits behind a message that keeps failing or timing out.
STUCK_HEAD_ATTEMPTS: Final = 3


def head_stuck(attempts: int, max_delivery_attempts: int) -> bool:
    return attempts >= 2 and attempts >= min(STUCK_HEAD_ATTEMPTS, max_delivery_attempts)


@get("/queues/{queue_id:str}/groups")
async def groups(
    ctx: Ctx,
    queue_id: PathId,
    queues: Queues,
    browsing: Browsing,
    cursors: Cursors,
    group_state: Annotated[str | None, QueryParameter(name="state")] = None,
    cursor: Text = None,
) -> Template:
    found = await queues.get(queue_id)
    state = GroupState.parse(group_state) if group_state else None
    listed = await groups_found(browsing, cursors, queue_id, state, PAGE_SIZE, cursor or None)
    limit = found.queue.settings.max_delivery_attempts
    return page(
        ctx,
        "groups.html",
        queue=found.queue,
        stats=found.stats,
        groups=listed.items,
        stuck={g.group for g in listed.items if head_stuck(g.head_delivery_attempts, limit)},
        next_cursor=listed.next_cursor,
        cursor=cursor,
        state=group_state or "",
        states=GROUP_STATES,
        stuck_attempts=min(STUCK_HEAD_ATTEMPTS, limit),
        tab="groups",
    )


# -- dead letters --------------------------------------------------------------------------


@get("/queues/{queue_id:str}/dead-letters")
async def dead_letters_page(
    ctx: Ctx,
    queue_id: PathId,
    queues: Queues,
    dead_letters: DeadLetters,
    cursors: Cursors,
    group: Text = None,
    match: Text = None,
    cursor: Text = None,
    notice: Text = None,
    n: Text = None,
    of: Text = None,
) -> Template:
    found = await queues.get(queue_id)
    search = SearchForm.read(group, match)
    records, next_cursor = [], None
    if search.valid:
        listed = await dead_letters_found(
            dead_letters,
            cursors,
            queue_id,
            search.search(),
            PAGE_SIZE,
            cursor or None,
        )
        records, next_cursor = listed.items, listed.next_cursor
    base = _queue_path(queue_id, "/dead-letters")
    filters = search.params()
    return page(
        ctx,
        "dead_letters.html",
        status=200 if search.valid else 400,
        queue=found.queue,
        stats=found.stats,
        records=records,
        next_cursor=next_cursor,
        cursor=cursor,
        search=search,
        filters=filters,
        here=_with_query(base, {**filters, "cursor": cursor or ""}),
        notice=notice_text(notice, n, of=of),
        redrive_limit=REDRIVE_LIMIT,
        default_redrive_limit=DEFAULT_REDRIVE_LIMIT,
        bulk_limit=BULK_LIMIT,
        default_bulk_limit=DEFAULT_BULK_LIMIT,
        tab="dead_letters",
    )


@get("/queues/{queue_id:str}/dead-letters/{message_id:str}")
async def dead_letter(
    ctx: Ctx,
    queue_id: PathId,
    message_id: PathId,
    queues: Queues,
    dead_letters: DeadLetters,
) -> Template:
    found = await queues.get(queue_id)
    record = await dead_letters.get(queue_id, message_id)
    return page(ctx, "dead_letter.html", queue=found.queue, record=record, tab="dead_letters")


@post("/queues/{queue_id:str}/dead-letters/{message_id:str}/redrive")
async def redrive_one(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    message_id: PathId,
    dead_letters: DeadLetters,
) -> Response[Any]:
    await dead_letters.redrive(
        DeadLetterCommand(queue_id=queue_id, message_id=message_id, caller=caller_of(request))
    )
    return see_other(ctx, _queue_path(queue_id, "/dead-letters", notice="redriven"))


@get("/queues/{queue_id:str}/dead-letters/{message_id:str}/delete")
async def confirm_delete_dead_letter(
    ctx: Ctx,
    queue_id: PathId,
    message_id: PathId,
    queues: Queues,
    dead_letters: DeadLetters,
) -> Template:
    found = await queues.get(queue_id)
    record = await dead_letters.get(queue_id, message_id)
    return page(ctx, "dead_letter_delete.html", queue=found.queue, record=record)


@post("/queues/{queue_id:str}/dead-letters/{message_id:str}/delete")
async def delete_dead_letter(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    message_id: PathId,
    dead_letters: DeadLetters,
) -> Response[Any]:
    await dead_letters.delete(
        DeadLetterCommand(queue_id=queue_id, message_id=message_id, caller=caller_of(request))
    )
    return see_other(ctx, _queue_path(queue_id, "/dead-letters", notice="dead_letter_deleted"))


# -- consumers -----------------------------------------------------------------------------


def _queue_filter(queue_id: str | None) -> UUID | None:
    if not queue_id:
        return None
    try:
        return UUID(queue_id)
    except ValueError:
        raise InvalidInput("queue_id must be a UUID.", code="invalid_queue_id") from None


async def _queue_choices(
    queues: QueueService, cursors: Cursors, chosen: UUID | None
) -> dict[str, Any]:
    """What a page's queue filter offers: the first queues by name, and the chosen one."""
    choices = await queues_page(queues, cursors, limit=QUEUE_CHOICES)
    return {
        "queues": choices.items,
        "names": {str(q.id): q.name for q in choices.items},
        "queue_id": str(chosen) if chosen else "",
    }


@get("/consumers")
async def consumers(
    ctx: Ctx,
    activity: Activity,
    queues: Queues,
    cursors: Cursors,
    queue_id: Text = None,
    health: Text = None,
    cursor: Text = None,
) -> Template:
    queue_filter = _queue_filter(queue_id)
    listed = await consumers_page(
        activity,
        cursors,
        limit=PAGE_SIZE,
        cursor=cursor or None,
        queue_id=queue_filter,
        health=health or None,
    )
    return page(
        ctx,
        "consumers.html",
        consumers=listed.items,
        next_cursor=listed.next_cursor,
        cursor=cursor,
        **await _queue_choices(queues, cursors, queue_filter),
        health=health or "",
        healths=[h.value for h in ConsumerHealth],
        now=datetime.now(UTC),
    )


# -- audit log -----------------------------------------------------------------------------


@get("/audit")
async def audit_log(
    ctx: Ctx,
    activity: Activity,
    queues: Queues,
    cursors: Cursors,
    queue_id: Text = None,
    action: Text = None,
    cursor: Text = None,
) -> Template:
    queue_filter = _queue_filter(queue_id)
    records = await audit_log_page(
        activity,
        cursors,
        limit=PAGE_SIZE,
        cursor=cursor,
        queue_id=queue_filter,
        action=action or None,
    )
    return page(
        ctx,
        "audit.html",
        records=records.items,
        next_cursor=records.next_cursor,
        cursor=cursor,
        **await _queue_choices(queues, cursors, queue_filter),
        actions=[a.value for a in AuditAction],
        action=action or "",
    )


# -- signing in and out --------------------------------------------------------------------


@get("/sign-in", opt={PUBLIC: True})
async def sign_in_page(
    ctx: Ctx,
    console_sessions: NamedDependency[ConsoleSessions],
    next: Text = None,
    notice: Text = None,
) -> Response[Any]:
    target = safe_next(next)
    if not console_sessions.auth_enabled or ctx.operator is not None:
        return see_other(ctx, target)
    return page(ctx, "sign_in.html", next=target, notice=notice_text(notice, None))


@post("/sign-in", opt={PUBLIC: True})
async def sign_in(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    console_sessions: NamedDependency[ConsoleSessions],
) -> Response[Any]:
    form = await request.form()
    target = safe_next(form.get("next"))
    if not console_sessions.auth_enabled:
        return see_other(ctx, target)
    secret = str(form.get("token", "")).strip()
    session = await console_sessions.sign_in(secret) if secret else None
    operator = console_sessions.operator(session)
    if session is None or operator is None:
        return page(ctx, "sign_in.html", status=401, next=target, error="That token is not valid.")
    if not console_sessions.may_view(operator):
        return page(
            ctx,
            "sign_in.html",
            status=403,
            next=target,
            error=f"Token “{operator.name}” has neither the admin nor the read scope "
            "the console needs.",
        )
    ctx.new_cookie = await console_sessions.dump(session)
    return see_other(ctx, target)


@post("/sign-out", opt={PUBLIC: True})
async def sign_out(ctx: Ctx, console_sessions: NamedDependency[ConsoleSessions]) -> Response[Any]:
    # A new anonymous session replaces the signed-in one (its id changes too).
    ctx.new_cookie = await console_sessions.dump(console_sessions.anonymous())
    if not console_sessions.auth_enabled:
        return see_other(ctx, ROOT + "/")
    return see_other(ctx, f"{ROOT}/sign-in?notice=signed_out")


def not_found_page(ctx: ConsoleContext) -> Template:
    return refused(ctx, 404, "Not found", "There is no console page at this address.")


ROUTES = [
    overview,
    overview_fragment,
    *LIFECYCLE_ROUTES,
    queue_page,
    save_settings,
    pause,
    resume,
    confirm_purge,
    purge,
    *BULK_ROUTES,
    messages,
    message,
    confirm_delete_message,
    delete_message,
    groups,
    dead_letters_page,
    dead_letter,
    redrive_one,
    confirm_delete_dead_letter,
    delete_dead_letter,
    *SCHEDULE_ROUTES,
    consumers,
    audit_log,
    sign_in_page,
    sign_in,
    sign_out,
]
