"""Pagination cursors on the wire: opaque, tamper-evident, validated in full when opened.

A cursor carries a list's position (``retsu.domain.pagination``) to the client and back.
It is ``itsdangerous``'s URL-safe serialisation of ``[version, scope, *position]``, signed
with HMAC-SHA256 under the key every API process shares (made once by ``retsu migrate``,
read through the ``ServerSecrets`` port), so a cursor from one process opens on any other:

* the signer's salt is the list's ``kind`` (queues, dead letters, messages, consumers,
  audit log), so a cursor of one list is never taken for another's;
* ``scope`` binds the cursor to what was listed (the queue, the filters), so it is never
  replayed against another queue or filter to give a wrong page;
* the position is the keyset of the last item of the page (never an offset), checked by
  the position's own ``read``.

Anything that does not verify, or holds the wrong shape or types, is
``InvalidInput(code="invalid_cursor")`` — never a crash, never a wrong page.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from itsdangerous import BadData, URLSafeSerializer

from retsu.application.ports import ServerSecrets
from retsu.domain.pagination import invalid_cursor

P = TypeVar("P")

CURSOR_VERSION = 2  # 1: the hand-written envelope that lived in the domain
MAX_CURSOR_LENGTH = 1024


class CursorKind:
    QUEUES = "q"
    DEAD_LETTERS = "d"
    MESSAGES = "m"
    CONSUMERS = "c"
    AUDIT_LOG = "a"
    SCHEDULES = "s"
    GROUPS = "g"


class Cursors:
    """Opens and seals the cursors of every list; one per process."""

    def __init__(self, secrets: ServerSecrets) -> None:
        self._secrets = secrets
        self._serializer: URLSafeSerializer | None = None
        self._lock = asyncio.Lock()

    async def _signed(self) -> URLSafeSerializer:
        if self._serializer is None:
            async with self._lock:
                if self._serializer is None:
                    key = await self._secrets.cursor_signing_key()
                    self._serializer = URLSafeSerializer(
                        key,
                        salt="retsu.cursor",
                        signer_kwargs={"digest_method": hashlib.sha256},
                    )
        return self._serializer

    async def open(
        self,
        kind: str,
        scope: list[Any],
        token: str | None,
        read: Callable[[list[Any]], P],
    ) -> P | None:
        """The position in ``token`` (None when there is no token), after checking its
        signature, version, kind and scope; ``read`` checks the position's own shape."""
        if token is None:
            return None
        if not 0 < len(token) <= MAX_CURSOR_LENGTH or not token.isascii():
            raise invalid_cursor()
        serializer = await self._signed()
        try:
            content = serializer.loads(token, salt=kind)
        except (BadData, ValueError, RecursionError):
            raise invalid_cursor() from None
        # One position, one cursor: a token that only spells the signature differently
        # (base64's unused low bits) is not the cursor this server issued.
        if serializer.dumps(content, salt=kind) != token:
            raise invalid_cursor()
        if (
            not isinstance(content, list)
            or len(content) < 2
            or type(content[0]) is not int
            or content[0] != CURSOR_VERSION
            or content[1] != scope
        ):
            raise invalid_cursor()
        return read(content[2:])

    async def seal(self, kind: str, scope: list[Any], position: list[Any] | None) -> str | None:
        """The cursor of ``position`` (a position's ``seal()``), or None (no next page)."""
        if position is None:
            return None
        serializer = await self._signed()
        token = serializer.dumps([CURSOR_VERSION, scope, *position], salt=kind)
        return token if isinstance(token, str) else token.decode("ascii")
