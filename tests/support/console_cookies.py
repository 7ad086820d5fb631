"""The console's session cookie, rebuilt from the server secret the way the console signs
it (adapters/http/console/session.py): what the security tests forge with. Kept separate
from the console's code on purpose, so a change of format there fails these tests."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from itsdangerous import URLSafeTimedSerializer

SALT = "retsu.console.session.v1"


def _serializer(server_secret: bytes) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(
        server_secret,
        salt=SALT,
        signer_kwargs={"key_derivation": "hmac", "digest_method": hashlib.sha256},
    )


def read_cookie(server_secret: bytes, cookie: str) -> dict[str, Any]:
    payload: dict[str, Any] = _serializer(server_secret).loads(cookie)
    return payload


def forge_cookie(server_secret: bytes, payload: dict[str, Any], *, age_seconds: float = 0) -> str:
    """A cookie with this payload, signed as if issued ``age_seconds`` ago."""
    serializer = _serializer(server_secret)
    signer = serializer.make_signer(serializer.salt)
    signer.get_timestamp = lambda: int(time.time() - age_seconds)  # type: ignore[method-assign]
    return signer.sign(serializer.dump_payload(payload)).decode("ascii")
