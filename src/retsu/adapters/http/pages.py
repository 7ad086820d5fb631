"""The lists, a page at a time, as the JSON routes and the console both serve them.

Each function parses the list's filters (their own error codes first), checks the limit,
opens the cursor (bound to the list and its filters), asks the use case for the page and
seals the next cursor — the one place a list's query string becomes a use case's query.
The searchable lists also come as ``…_found`` taking filters already parsed: the console
reads its search fields into a form (an error shown beside its field) and asks for the
same page, with the same cursor, through them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from uuid import UUID

from retsu.adapters.http.cursors import CursorKind, Cursors
from retsu.application.activity import (
    ActivityService,
    ConsumerView,
    ListAuditLogQuery,
    ListConsumersQuery,
)
from retsu.application.browsing import BrowsingService, ListGroupsQuery, ListMessagesQuery
from retsu.application.dead_letters import DeadLetterService, ListDeadLettersQuery
from retsu.application.queues import ListQueuesQuery, QueueService
from retsu.application.schedules import ListSchedulesQuery, ScheduleService
from retsu.domain.audit import AuditAction, AuditRecord
from retsu.domain.browsing import BrowseState, MessagePosition, StoredMessage
from retsu.domain.consumer import ConsumerHealth, ConsumerPosition
from retsu.domain.groups import GroupPosition, GroupState, GroupSummary
from retsu.domain.message import DeadLetter, Priority, validate_group
from retsu.domain.pagination import (
    DEFAULT_LIST_LIMIT,
    LIST_LIMIT,
    AuditPosition,
    DeadLetterPosition,
    QueuePosition,
)
from retsu.domain.queue import Queue
from retsu.domain.schedule import Schedule, SchedulePosition
from retsu.domain.search import EVERYTHING, Search, parse_match, parse_reason

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Listed(Generic[T]):
    items: list[T]
    next_cursor: str | None


async def queues_page(
    queues: QueueService,
    cursors: Cursors,
    *,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
    name: str | None = None,
) -> Listed[Queue]:
    query = ListQueuesQuery(limit=limit, name=name)
    scope: list[str | None] = [name]
    after = await cursors.open(CursorKind.QUEUES, scope, cursor, QueuePosition.read)
    page = await queues.list(query, after)
    next_cursor = await cursors.seal(
        CursorKind.QUEUES, scope, None if page.next is None else page.next.seal()
    )
    return Listed(page.items, next_cursor)


def parse_search(
    *,
    priority: str | None = None,
    group: str | None = None,
    match: str | None = None,
    reason: str | None = None,
) -> Search:
    """A list's search filters as query parameters give them, with the domain's codes
    (``invalid_priority``, ``invalid_group``, ``invalid_match``, ``invalid_reason``)."""
    if priority is None and group is None and match is None and reason is None:
        return EVERYTHING
    return Search(
        priority=None if priority is None else Priority.parse(priority),
        group=None if group is None else validate_group(group),
        match=None if match is None else parse_match(match),
        reason=None if reason is None else parse_reason(reason),
    )


def match_digest(match: dict[str, Any] | None) -> str | None:
    """What a cursor binds of a ``match``: a digest of its canonical form (a match may be
    4,096 characters; a cursor stays short)."""
    if match is None:
        return None
    canonical = json.dumps(match, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


async def dead_letters_page(
    dead_letters: DeadLetterService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
    group: str | None = None,
    match: str | None = None,
    reason: str | None = None,
) -> Listed[DeadLetter]:
    search = parse_search(group=group, match=match, reason=reason)
    return await dead_letters_found(dead_letters, cursors, queue_id, search, limit, cursor)


async def dead_letters_found(
    dead_letters: DeadLetterService,
    cursors: Cursors,
    queue_id: UUID,
    search: Search,
    limit: int,
    cursor: str | None,
) -> Listed[DeadLetter]:
    query = ListDeadLettersQuery(queue_id=queue_id, limit=limit, search=search)
    scope = [str(queue_id), search.group, match_digest(search.match), search.reason]
    after = await cursors.open(CursorKind.DEAD_LETTERS, scope, cursor, DeadLetterPosition.read)
    page = await dead_letters.list(query, after)
    next_cursor = await cursors.seal(
        CursorKind.DEAD_LETTERS, scope, None if page.next is None else page.next.seal()
    )
    return Listed(page.items, next_cursor)


async def messages_page(
    browsing: BrowsingService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    state: str | None = None,
    priority: str | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
    group: str | None = None,
    match: str | None = None,
) -> Listed[StoredMessage]:
    parsed_state = None if state is None else BrowseState.parse(state)
    search = parse_search(priority=priority, group=group, match=match)
    return await messages_found(browsing, cursors, queue_id, parsed_state, search, limit, cursor)


async def messages_found(
    browsing: BrowsingService,
    cursors: Cursors,
    queue_id: UUID,
    state: BrowseState | None,
    search: Search,
    limit: int,
    cursor: str | None,
) -> Listed[StoredMessage]:
    query = ListMessagesQuery(
        queue_id=queue_id,
        state=state,
        priority=search.priority,
        limit=limit,
        group=search.group,
        match=search.match,
    )
    scope = [
        str(queue_id),
        None if state is None else state.value,
        None if search.priority is None else search.priority.name,
        search.group,
        match_digest(search.match),
    ]
    after = await cursors.open(
        CursorKind.MESSAGES, scope, cursor, lambda values: MessagePosition.read(state, values)
    )
    page = await browsing.list(query, after)
    next_cursor = await cursors.seal(
        CursorKind.MESSAGES, scope, None if page.next is None else page.next.seal(state)
    )
    return Listed(page.items, next_cursor)


async def groups_page(
    browsing: BrowsingService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    state: str | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
) -> Listed[GroupSummary]:
    parsed_state = None if state is None else GroupState.parse(state)
    return await groups_found(browsing, cursors, queue_id, parsed_state, limit, cursor)


async def groups_found(
    browsing: BrowsingService,
    cursors: Cursors,
    queue_id: UUID,
    state: GroupState | None,
    limit: int,
    cursor: str | None,
) -> Listed[GroupSummary]:
    query = ListGroupsQuery(queue_id=queue_id, state=state, limit=limit)
    scope = [str(queue_id), None if state is None else state.value]
    after = await cursors.open(CursorKind.GROUPS, scope, cursor, GroupPosition.read)
    page = await browsing.groups(query, after)
    next_cursor = await cursors.seal(
        CursorKind.GROUPS, scope, None if page.next is None else page.next.seal()
    )
    return Listed(page.items, next_cursor)


async def consumers_page(
    activity: ActivityService,
    cursors: Cursors,
    *,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
    queue_id: UUID | None = None,
    health: str | None = None,
) -> Listed[ConsumerView]:
    LIST_LIMIT.check(limit)  # before the filter, as the contract's examples expect
    parsed_health = None if health is None else ConsumerHealth.parse(health)
    query = ListConsumersQuery(limit=limit, queue_id=queue_id, health=parsed_health)
    scope = [
        None if queue_id is None else str(queue_id),
        None if parsed_health is None else parsed_health.value,
    ]
    after = await cursors.open(CursorKind.CONSUMERS, scope, cursor, ConsumerPosition.read)
    page = await activity.consumers(query, after)
    next_cursor = await cursors.seal(
        CursorKind.CONSUMERS, scope, None if page.next is None else page.next.seal()
    )
    return Listed(page.items, next_cursor)


async def audit_log_page(
    activity: ActivityService,
    cursors: Cursors,
    *,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
    queue_id: UUID | None = None,
    action: str | None = None,
) -> Listed[AuditRecord]:
    LIST_LIMIT.check(limit)  # before the filter, as the contract's examples expect
    parsed_action = None if action is None else AuditAction.parse(action)
    query = ListAuditLogQuery(limit=limit, queue_id=queue_id, action=parsed_action)
    scope = [
        None if queue_id is None else str(queue_id),
        None if parsed_action is None else parsed_action.value,
    ]
    after = await cursors.open(CursorKind.AUDIT_LOG, scope, cursor, AuditPosition.read)
    page = await activity.audit_log(query, after)
    next_cursor = await cursors.seal(
        CursorKind.AUDIT_LOG, scope, None if page.next is None else page.next.seal()
    )
    return Listed(page.items, next_cursor)


async def schedules_page(
    schedules: ScheduleService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    limit: int = DEFAULT_LIST_LIMIT,
    cursor: str | None = None,
) -> Listed[Schedule]:
    query = ListSchedulesQuery(queue_id=queue_id, limit=limit)
    scope = [str(queue_id)]
    after = await cursors.open(CursorKind.SCHEDULES, scope, cursor, SchedulePosition.read)
    page = await schedules.list(query, after)
    next_cursor = await cursors.seal(
        CursorKind.SCHEDULES, scope, None if page.next is None else page.next.seal()
    )
    return Listed(page.items, next_cursor)
