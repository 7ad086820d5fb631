"""The console's session cookie and CSRF tokens (SPEC §3.9).

* The session lives in one cookie, ``retsu_console``: a random session id, the signed-in
  token's name (``None`` for an anonymous session) and a keyed fingerprint of that token's
  secret, serialised and signed with a timestamp by ``itsdangerous``. Nothing is kept on
  the server, so every API process accepts every other's cookies.
* The signing key is derived from the server secret that ``retsu migrate`` stores (the one
  every API process already reads for cursors): itsdangerous derives a dedicated key per
  purpose as ``HMAC-SHA256(secret, salt)`` (``key_derivation="hmac"``), with a salt of its
  own for the session, the CSRF tokens and the token fingerprints, so none of these can be
  replayed as another (nor as a cursor signature).
* A session ends after ``SESSION_IDLE_SECONDS`` without a request (the signature carries
  the time the cookie was last issued, and an active session gets a fresh cookie at most
  once a minute) and at the latest ``SESSION_MAX_AGE_SECONDS`` after sign-in (the sign-in
  time is part of the signed payload). An older cookie is refused whatever the browser
  kept. Sign-out replaces the cookie; as nothing is stored on the server, a copy taken
  before sign-out stays usable until one of those limits (docs/console.md). A session
  also ends when its token is removed from ``auth.tokens`` or given another secret: the
  fingerprint is checked against the configuration on every request, and the scopes are
  read from the configuration, never from the cookie.
* The CSRF token of a session is a keyed signature of its id (synchronizer token): every
  state-changing form carries it, and it is compared in constant time. An anonymous
  session exists for CSRF alone (auth off, or the sign-in form before signing in): with
  ``SameSite=Strict`` a cross-site form carries no cookie at all, so it cannot pass.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any, Final

from itsdangerous import BadData, Signer, URLSafeTimedSerializer

from retsu.adapters.http.auth import ADMIN, READ, AuthConfig, TokenTable
from retsu.application.ports import ServerSecrets
from retsu.domain.audit import ANONYMOUS

__all__ = [
    "COOKIE_NAME",
    "CSRF_FIELD",
    "SESSION_IDLE_SECONDS",
    "SESSION_MAX_AGE_SECONDS",
    "ConsoleSessions",
    "Operator",
    "Session",
    "SessionKeys",
]

COOKIE_NAME: Final = "retsu_console"
CSRF_FIELD: Final = "csrf_token"
SESSION_MAX_AGE_SECONDS: Final = 8 * 3600
SESSION_IDLE_SECONDS: Final = 30 * 60
# An active session's cookie is re-issued (its idle clock restarted) at most this often.
_RENEW_AFTER_SECONDS: Final = 60

# A cookie longer than this is not ours (a browser sends up to ~4 KiB per cookie).
_MAX_COOKIE_LENGTH: Final = 1024

_SESSION_SALT: Final = "retsu.console.session.v1"
_CSRF_SALT: Final = "retsu.console.csrf.v1"
_TOKEN_SALT: Final = "retsu.console.token.v1"


@dataclass(frozen=True, slots=True)
class Session:
    sid: str
    token_name: str | None = None  # None: anonymous
    fingerprint: str | None = None
    # When the session began (Unix seconds): the absolute limit counts from here.
    started_at: int = 0
    # Whether its cookie is old enough to be re-issued (the idle clock restarted).
    stale: bool = False


@dataclass(frozen=True, slots=True)
class Operator:
    """Who is using the console: the audit actor and what the console lets them do."""

    name: str
    scopes: frozenset[str]
    can_change: bool
    auth_enabled: bool

    @property
    def scope_label(self) -> str:
        return ", ".join(sorted(self.scopes)) if self.scopes else "open"


OPEN_OPERATOR: Final = Operator(
    name=ANONYMOUS, scopes=frozenset(), can_change=True, auth_enabled=False
)


def _signer_kwargs() -> dict[str, Any]:
    return {"key_derivation": "hmac", "digest_method": hashlib.sha256}


class SessionKeys:
    """The three keyed functions, derived from the shared server secret."""

    def __init__(self, server_secret: bytes) -> None:
        kwargs = _signer_kwargs()
        self.serializer = URLSafeTimedSerializer(
            server_secret, salt=_SESSION_SALT, signer_kwargs=kwargs
        )
        self._csrf = Signer(server_secret, salt=_CSRF_SALT, **kwargs)
        self._token = Signer(server_secret, salt=_TOKEN_SALT, **kwargs)

    def csrf_token(self, session: Session) -> str:
        return self._csrf.get_signature(session.sid).decode("ascii")

    def fingerprint(self, secret: str) -> str:
        """A keyed digest of a token secret: names the secret without revealing it."""
        digest = hashlib.sha256(secret.encode("utf-8")).digest()
        return self._token.get_signature(digest).decode("ascii")


class ConsoleSessions:
    def __init__(self, secrets_port: ServerSecrets, auth: AuthConfig) -> None:
        self._secrets = secrets_port
        self._auth = auth
        self._table = TokenTable(auth.tokens)
        self._keys: SessionKeys | None = None
        self._fingerprints: dict[str, str] = {}

    @property
    def auth_enabled(self) -> bool:
        return self._auth.enabled

    async def keys(self) -> SessionKeys:
        if self._keys is None:
            self._keys = SessionKeys(await self._secrets.cursor_signing_key())
            self._fingerprints = {
                token.name: self._keys.fingerprint(token.secret) for token in self._auth.tokens
            }
        return self._keys

    # -- the cookie -------------------------------------------------------------------

    async def read(self, cookie: str | None) -> Session | None:
        """The session a cookie carries, or None: missing, tampered, expired, not ours."""
        if not cookie or len(cookie) > _MAX_COOKIE_LENGTH:
            return None
        keys = await self.keys()
        try:
            data, issued = keys.serializer.loads(
                cookie, max_age=SESSION_IDLE_SECONDS, return_timestamp=True
            )
        except BadData:
            return None
        if not isinstance(data, dict):
            return None
        sid, name, fingerprint = data.get("sid"), data.get("tok"), data.get("fp")
        started = data.get("at")
        now = time.time()
        if not isinstance(sid, str) or not sid or not isinstance(started, int):
            return None
        if now - started > SESSION_MAX_AGE_SECONDS:
            return None
        stale = now - issued.timestamp() > _RENEW_AFTER_SECONDS
        if name is None:
            return Session(sid, started_at=started, stale=stale)
        if not isinstance(name, str) or not isinstance(fingerprint, str):
            return None
        return Session(sid, name, fingerprint, started_at=started, stale=stale)

    async def dump(self, session: Session) -> str:
        keys = await self.keys()
        data = {
            "sid": session.sid,
            "tok": session.token_name,
            "fp": session.fingerprint,
            "at": session.started_at,
        }
        return str(keys.serializer.dumps(data))

    @staticmethod
    def anonymous() -> Session:
        return Session(secrets.token_urlsafe(18), started_at=int(time.time()))

    # -- signing in ------------------------------------------------------------------

    async def sign_in(self, secret: str) -> Session | None:
        """A fresh session (a new id: no fixation) for the token with this secret, or None.
        The secret is checked exactly like a bearer token (auth.TokenTable)."""
        keys = await self.keys()
        principal = self._table.match(secret.encode("utf-8"))
        if principal is None:
            return None
        name, _ = principal
        return Session(
            secrets.token_urlsafe(18),
            name,
            keys.fingerprint(secret),
            started_at=int(time.time()),
        )

    def operator(self, session: Session | None) -> Operator | None:
        """Who this session is, or None when auth is on and it is not a signed-in session
        of a token that is still configured with the same secret."""
        if not self._auth.enabled:
            return OPEN_OPERATOR
        # The fingerprints are computed with the keys (read() and sign_in() load them).
        if (
            self._keys is None
            or session is None
            or session.token_name is None
            or session.fingerprint is None
        ):
            return None
        expected = self._fingerprints.get(session.token_name)
        if expected is None or not hmac.compare_digest(expected, session.fingerprint):
            return None
        token = next(t for t in self._auth.tokens if t.name == session.token_name)
        return Operator(
            name=token.name,
            scopes=token.scopes,
            can_change=ADMIN in token.scopes,
            auth_enabled=True,
        )

    @staticmethod
    def may_view(operator: Operator) -> bool:
        """The console shows everything the API's reads show: admin or read tokens."""
        return not operator.auth_enabled or bool(operator.scopes & {ADMIN, READ})

    # -- CSRF -------------------------------------------------------------------------

    async def csrf_token(self, session: Session) -> str:
        return (await self.keys()).csrf_token(session)

    async def csrf_ok(self, session: Session | None, presented: object) -> bool:
        if session is None or not isinstance(presented, str) or not presented:
            return False
        expected = await self.csrf_token(session)
        return hmac.compare_digest(expected.encode("ascii"), presented.encode("utf-8"))
