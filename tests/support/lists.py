"""Lists as the HTTP layer serves them (filters as text, cursors), for use-case tests.

Cursors are the HTTP adapter's business (``adapters/http/cursors.py``): these helpers go
through the same ``pages`` functions the routes and the console call, so a test of a list
checks filters, limits and cursors exactly as a request would.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from itsdangerous import URLSafeSerializer

from retsu.adapters.http import pages
from retsu.adapters.http.cursors import CURSOR_VERSION, Cursors
from retsu.application.activity import ActivityService, ConsumerView


def seal_cursor(key: bytes, kind: str, scope: list[Any], position: list[Any]) -> str:
    """A cursor sealed exactly as the server seals one (to forge foreign ones)."""
    signer = URLSafeSerializer(
        key, salt="retsu.cursor", signer_kwargs={"digest_method": hashlib.sha256}
    )
    return str(signer.dumps([CURSOR_VERSION, scope, *position], salt=kind))


@dataclass(frozen=True)
class ListConsumersQuery:
    limit: int = 50
    cursor: str | None = None
    queue_id: UUID | None = None
    health: str | None = None


def consumers_lister(activity: ActivityService, cursors: Cursors) -> Any:
    async def list_consumers(query: ListConsumersQuery) -> pages.Listed[ConsumerView]:
        return await pages.consumers_page(
            activity,
            cursors,
            limit=query.limit,
            cursor=query.cursor,
            queue_id=query.queue_id,
            health=query.health,
        )

    return list_consumers
