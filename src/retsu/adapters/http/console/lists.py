"""The console's searchable lists, a page at a time: messages (state, priority, ``group``,
``match``), a queue's groups (state), dead letters (``group``, ``match``) — SPEC §3.6,
§3.10, §3.11.

Like ``adapters/http/pages.py`` (whose ``Listed`` these return), each parses its filters
with the domain's rules and codes, opens the cursor bound to the list and its filters, asks
the use case for the page and seals the next cursor. The search fields are read into a
``SearchForm`` so a wrong one (``invalid_match``, ``invalid_group``) is shown next to its
field instead of as an error page.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from retsu.adapters.http.cursors import CursorKind, Cursors
from retsu.adapters.http.pages import Listed
from retsu.application.browsing import BrowsingService, ListGroupsQuery, ListMessagesQuery
from retsu.application.dead_letters import DeadLetterService, ListDeadLettersQuery
from retsu.domain.browsing import BrowseState, MessagePosition, StoredMessage
from retsu.domain.errors import InvalidInput
from retsu.domain.groups import GroupPosition, GroupState, GroupSummary
from retsu.domain.message import DeadLetter, Priority, validate_group
from retsu.domain.pagination import DeadLetterPosition
from retsu.domain.search import EVERYTHING, Search, parse_match

# The groups list's cursor kind (the salt of its signature; CursorKind has none yet).
GROUPS_CURSOR: Final = "g"


@dataclass(slots=True)
class SearchForm:
    """The search fields as typed (``group``, ``match``) and what they mean; a field that
    does not parse has its error (and code) instead."""

    group_text: str = ""
    match_text: str = ""
    group: str | None = None
    match: dict[str, Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, group: str | None, match: str | None) -> SearchForm:
        form = cls(group_text=(group or "").strip(), match_text=(match or "").strip())
        if form.group_text:
            try:
                form.group = validate_group(form.group_text)
            except InvalidInput as error:
                form._fail("group", error)
        if form.match_text:
            try:
                form.match = parse_match(form.match_text)
            except InvalidInput as error:
                form._fail("match", error)
        return form

    def _fail(self, name: str, error: InvalidInput) -> None:
        self.errors[name] = error.detail
        self.codes[name] = error.code

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def given(self) -> bool:
        return bool(self.group_text or self.match_text)

    def search(self, priority: Priority | None = None) -> Search:
        return Search(priority=priority, group=self.group, match=self.match)

    def params(self) -> dict[str, str]:
        """The fields as a query string holds them (empty ones left out)."""
        return {k: v for k, v in (("group", self.group_text), ("match", self.match_text)) if v}

    def scope(self) -> list[str | None]:
        """What a cursor is bound to: the group, and a digest of the match (a match may be
        4,096 characters; a cursor stays short)."""
        return [self.group, match_digest(self.match)]


def match_digest(match: dict[str, Any] | None) -> str | None:
    if match is None:
        return None
    canonical = json.dumps(match, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def parse_state(text: str | None) -> BrowseState | None:
    return BrowseState.parse(text) if text else None


def parse_priority(text: str | None) -> Priority | None:
    return Priority.parse(text) if text else None


async def messages_list(
    browsing: BrowsingService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    state: BrowseState | None,
    priority: Priority | None,
    search: SearchForm,
    limit: int,
    cursor: str | None,
) -> Listed[StoredMessage]:
    query = ListMessagesQuery(
        queue_id=queue_id,
        state=state,
        priority=priority,
        limit=limit,
        group=search.group,
        match=search.match,
    )
    scope = [
        str(queue_id),
        None if state is None else state.value,
        None if priority is None else priority.name,
        *search.scope(),
    ]
    after = await cursors.open(
        CursorKind.MESSAGES, scope, cursor, lambda values: MessagePosition.read(state, values)
    )
    found = await browsing.list(query, after)
    next_cursor = await cursors.seal(
        CursorKind.MESSAGES, scope, None if found.next is None else found.next.seal(state)
    )
    return Listed(found.items, next_cursor)


async def groups_list(
    browsing: BrowsingService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    state: GroupState | None,
    limit: int,
    cursor: str | None,
) -> Listed[GroupSummary]:
    query = ListGroupsQuery(queue_id=queue_id, state=state, limit=limit)
    scope = [str(queue_id), None if state is None else state.value]
    after = await cursors.open(GROUPS_CURSOR, scope, cursor, GroupPosition.read)
    found = await browsing.groups(query, after)
    next_cursor = await cursors.seal(
        GROUPS_CURSOR, scope, None if found.next is None else found.next.seal()
    )
    return Listed(found.items, next_cursor)


async def dead_letters_list(
    dead_letters: DeadLetterService,
    cursors: Cursors,
    queue_id: UUID,
    *,
    search: SearchForm | None,
    limit: int,
    cursor: str | None,
) -> Listed[DeadLetter]:
    wanted = EVERYTHING if search is None else search.search()
    query = ListDeadLettersQuery(queue_id=queue_id, limit=limit, search=wanted)
    scope = [str(queue_id), *(search.scope() if search is not None else [None, None])]
    after = await cursors.open(CursorKind.DEAD_LETTERS, scope, cursor, DeadLetterPosition.read)
    found = await dead_letters.list(query, after)
    next_cursor = await cursors.seal(
        CursorKind.DEAD_LETTERS, scope, None if found.next is None else found.next.seal()
    )
    return Listed(found.items, next_cursor)
