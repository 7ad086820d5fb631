"""The console's search fields (SPEC §3.6, §3.11): ``group`` and ``match`` read into a
``SearchForm``, so a wrong one (``invalid_match``, ``invalid_group``) is shown next to its
field instead of as an error page. The pages themselves come from
``adapters/http/pages.py`` (``messages_found``, ``groups_found``, ``dead_letters_found``),
the same functions, cursors and rules the JSON routes use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from retsu.adapters.http.pages import match_digest
from retsu.domain.browsing import BrowseState
from retsu.domain.errors import InvalidInput
from retsu.domain.message import Priority, validate_group
from retsu.domain.search import Search, parse_match


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


def parse_state(text: str | None) -> BrowseState | None:
    return BrowseState.parse(text) if text else None


def parse_priority(text: str | None) -> Priority | None:
    return Priority.parse(text) if text else None
