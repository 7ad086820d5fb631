"""Cursors (the HTTP adapter's, over the domain's positions) and Idempotency-Keys: each
broken rule with its code."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from itsdangerous import URLSafeSerializer

from retsu.adapters.http.cursors import MAX_CURSOR_LENGTH, CursorKind, Cursors
from retsu.adapters.ids import uuid7
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.domain.errors import InvalidInput
from retsu.domain.idempotency import fingerprint, validate_idempotency_key
from retsu.domain.message import NewMessage
from retsu.domain.pagination import (
    AuditPosition,
    DeadLetterPosition,
    QueuePosition,
    from_micros,
    to_micros,
)

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def seal_cursor(key: bytes, kind: str, scope: list[Any], position: list[Any]) -> str:
    token = asyncio.run(Cursors(RandomServerSecrets(key)).seal(kind, scope, position))
    assert token is not None
    return token


def open_cursor(key: bytes, kind: str, scope: list[Any], token: str) -> list[Any]:
    position = asyncio.run(
        Cursors(RandomServerSecrets(key)).open(kind, scope, token, lambda values: values)
    )
    assert position is not None
    return position


def _refused(action: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as raised:
        action()
    return raised.value


def test_a_sealed_cursor_opens_to_its_position() -> None:
    token = seal_cursor(KEY, CursorKind.QUEUES, [None], QueuePosition("orders").seal())
    assert token.isascii() and "=" not in token
    position = open_cursor(KEY, CursorKind.QUEUES, [None], token)
    assert QueuePosition.read(position) == QueuePosition("orders")


def test_positions_round_trip_exactly() -> None:
    moment = datetime(2026, 3, 4, 5, 6, 7, 891_011, tzinfo=UTC)
    dead = DeadLetterPosition(moment, 2**40)
    audit = AuditPosition(moment, uuid7())
    for position, reader, kind in (
        (dead, DeadLetterPosition.read, CursorKind.DEAD_LETTERS),
        (audit, AuditPosition.read, CursorKind.AUDIT_LOG),
    ):
        token = seal_cursor(KEY, kind, ["scope"], position.seal())
        assert reader(open_cursor(KEY, kind, ["scope"], token)) == position
    assert from_micros(to_micros(moment)) == moment
    assert to_micros(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=1)) == 1


def _flip(token: str, index: int) -> str:
    replacement = "A" if token[index] != "A" else "B"
    return token[:index] + replacement + token[index + 1 :]


def test_any_change_to_a_cursor_is_refused() -> None:
    # Payloads of every length modulo 3, so the last character has 0, 2 or 4 unused bits.
    for name in ("orders", "orders1", "orders12"):
        token = seal_cursor(KEY, CursorKind.QUEUES, [None], [name])
        for index in range(len(token)):
            changed = _flip(token, index)
            error = _refused(lambda t=changed: open_cursor(KEY, CursorKind.QUEUES, [None], t))
            assert error.code == "invalid_cursor"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "x",
        "abc",
        "not a cursor",
        "////",
        "a" * (MAX_CURSOR_LENGTH + 1),
        "eyJ9",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "%00",
        "ÿÿÿÿ",
        "abc=",
        "a.b",
        "WzIsW251bGxdLCJvcmRlcnMiXQ",  # a payload without its signature
    ],
)
def test_garbage_is_invalid_cursor(token: str) -> None:
    error = _refused(lambda: open_cursor(KEY, CursorKind.QUEUES, [None], token))
    assert error.code == "invalid_cursor"
    assert "cursor" in error.detail


def test_a_cursor_signed_with_another_key_is_refused() -> None:
    token = seal_cursor(OTHER_KEY, CursorKind.QUEUES, [None], ["orders"])
    assert _refused(lambda: open_cursor(KEY, CursorKind.QUEUES, [None], token)).code == (
        "invalid_cursor"
    )


def test_a_cursor_of_another_list_or_scope_is_refused() -> None:
    token = seal_cursor(KEY, CursorKind.DEAD_LETTERS, ["queue-a"], [1, 2])
    for kind, scope in (
        (CursorKind.AUDIT_LOG, ["queue-a"]),
        (CursorKind.DEAD_LETTERS, ["queue-b"]),
        (CursorKind.DEAD_LETTERS, []),
    ):
        error = _refused(lambda k=kind, s=scope: open_cursor(KEY, k, s, token))
        assert error.code == "invalid_cursor"


def _forge(payload: Any) -> str:
    """A correctly signed cursor with any content, as a server bug or old version might make."""
    signer = URLSafeSerializer(
        KEY, salt="retsu.cursor", signer_kwargs={"digest_method": hashlib.sha256}
    )
    return str(signer.dumps(payload, salt=CursorKind.QUEUES))


@pytest.mark.parametrize(
    "payload",
    [
        {"v": 2},
        [],
        [2],
        [1, [None], "orders"],  # an older version
        [True, [None], "orders"],
        [2.0, [None], "orders"],
        [2, None, "orders"],
        "string",
        None,
    ],
)
def test_a_signed_cursor_of_the_wrong_shape_is_refused(payload: Any) -> None:
    token = _forge(payload)
    assert _refused(lambda: open_cursor(KEY, CursorKind.QUEUES, [None], token)).code == (
        "invalid_cursor"
    )


@pytest.mark.parametrize(
    ("reader", "position"),
    [
        (QueuePosition.read, []),
        (QueuePosition.read, [1]),
        (QueuePosition.read, ["a", "b"]),
        (QueuePosition.read, [None]),
        (DeadLetterPosition.read, [1]),
        (DeadLetterPosition.read, ["1", 2]),
        (DeadLetterPosition.read, [1, 2.5]),
        (DeadLetterPosition.read, [True, 2]),
        (DeadLetterPosition.read, [10**30, 2]),
        (AuditPosition.read, [1, "not-a-uuid"]),
        (AuditPosition.read, [1, 2]),
        (AuditPosition.read, ["1", str(UUID(int=1))]),
        (AuditPosition.read, [-(10**20), str(UUID(int=1))]),
    ],
)
def test_a_position_of_the_wrong_shape_is_refused(reader: Any, position: list[Any]) -> None:
    assert _refused(lambda: reader(position)).code == "invalid_cursor"


# -- Idempotency-Key -------------------------------------------------------------------


@pytest.mark.parametrize("key", ["a", "order-7", "x" * 128, "!~", "AZaz09-_.:/+=@"])
def test_visible_ascii_keys_are_valid(key: str) -> None:
    assert validate_idempotency_key(key) == key


@pytest.mark.parametrize(
    "key", ["", "x" * 129, "a b", " a", "a\t", "tab\there", "é", "a\x7f", "a\x00", "\u3042"]
)
def test_other_keys_are_invalid_idempotency_key(key: str) -> None:
    assert _refused(lambda: validate_idempotency_key(key)).code == "invalid_idempotency_key"


def test_the_fingerprint_is_of_the_parsed_message() -> None:
    base = fingerprint(NewMessage.parse("p", "HIGH"))
    assert fingerprint(NewMessage.parse("p", "HIGH", None, None)) == base
    assert fingerprint(NewMessage.parse("p", "HIGH", None, 0)) == base  # no delay == 0
    assert len(base) == 32
    for other in (
        NewMessage.parse("q", "HIGH"),
        NewMessage.parse("p", "LOW"),
        NewMessage.parse("p", "HIGH", 60),
        NewMessage.parse("p", "HIGH", None, 5),
        NewMessage.parse("p ", "HIGH"),
    ):
        assert fingerprint(other) != base
    assert fingerprint(NewMessage.parse("\ud800", "LOW"))  # lone surrogates hash too
