"""Server secrets for one process on its own (tests, in-memory runs): a random key."""

from __future__ import annotations

import secrets


class RandomServerSecrets:
    def __init__(self, cursor_signing_key: bytes | None = None) -> None:
        self._cursor_signing_key = cursor_signing_key or secrets.token_bytes(32)

    async def cursor_signing_key(self) -> bytes:
        return self._cursor_signing_key
