"""A search's parameters (SPEC §3.11) for the statements that filter by it: each NULL
admits everything; ``match`` goes as JSON text, cast to jsonb and compared with ``@>``
against the payload read by ``retsu_jsonb`` (NULL, so never a match, when not JSON)."""

from __future__ import annotations

from typing import Any

import msgspec

from retsu.domain.search import Search


def search_parameters(search: Search) -> dict[str, Any]:
    return {
        "priority": None if search.priority is None else int(search.priority),
        "group": search.group,
        "reason": search.reason,
        "match": None if search.match is None else msgspec.json.encode(search.match).decode(),
    }
