"""json_keys.KeyCheck against the slow, obvious check (Python's json with
object_pairs_hook) on generated bodies: repeats, escapes, nulls, whitespace, and field
names written inside values — the cases its counting shortcut must hand to the exact
check."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from retsu.adapters.http.dto import BatchAcknowledgeBody, BatchEnqueueBody, MessageBody
from retsu.adapters.http.json_keys import KeyCheck

NAMES = ("payload", "priority", "ttl_seconds", "delay_seconds")
VALUES: dict[str, Any] = {
    "payload": st.sampled_from(
        ["x", '"priority"', "ttl_seconds", '{"payload": 1, "payload": 2}', "\\u0070", "é"]
    ),
    "priority": st.sampled_from(["HIGH", "LOW"]),
    "ttl_seconds": st.sampled_from([None, 60]),
    "delay_seconds": st.sampled_from([None, 0, 5]),
}


def _repeats(body: bytes) -> bool:
    found = False

    def pairs(items: list[tuple[str, Any]]) -> None:
        nonlocal found
        found = found or len({key for key, _ in items}) < len(items)

    json.loads(body, object_pairs_hook=pairs)
    return found


def _escaped(name: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if i == 0 else c for i, c in enumerate(name))


@st.composite
def entries(draw: st.DrawFn) -> str:
    """One message object, as some client might write it."""
    members: list[tuple[str, Any]] = [
        (name, draw(VALUES[name]))
        for name in NAMES
        if name in ("payload", "priority") or draw(st.booleans())
    ]
    if draw(st.integers(0, 3)) == 0:  # a repeat, with the same or another value
        name, value = draw(st.sampled_from(members))
        members.append((name, draw(st.sampled_from([value, draw(VALUES[name])]))))
    members = draw(st.permutations(members))
    space = draw(st.sampled_from(["", " ", "\n  "]))
    parts = []
    for name, value in members:
        key = _escaped(name) if draw(st.integers(0, 5)) == 0 else name
        text = json.dumps(value, ensure_ascii=draw(st.booleans()))
        parts.append(f'"{key}":{space}{text}')
    return "{" + f",{space}".join(parts) + "}"


@settings(max_examples=400, deadline=None)
@given(st.lists(entries(), min_size=1, max_size=5), st.booleans())
def test_a_batch_is_judged_as_the_exact_check_does(items: list[str], single: bool) -> None:
    kind: Any = MessageBody if single else BatchEnqueueBody
    text = items[0] if single else '{"messages": [' + ", ".join(items) + "]}"
    body = text.encode()
    value = msgspec.json.decode(body, type=kind)
    assert (KeyCheck(kind).repeated(body, value) is not None) == _repeats(body), text


def test_the_repeated_key_is_named_unescaped() -> None:
    body = b'{"messages": [{"id": "01890a5d-ac96-774b-bcce-b302099a8057", '
    body += b'"receipt_handle": "a", "receipt_h\\u0061ndle": "b"}]}'
    value = msgspec.json.decode(body, type=BatchAcknowledgeBody)
    assert KeyCheck(BatchAcknowledgeBody).repeated(body, value) == "receipt_handle"
    body = b'{"payload": "a", "priority": "LOW", "\\u0070ayload": "b"}'
    value = msgspec.json.decode(body, type=MessageBody)
    assert KeyCheck(MessageBody).repeated(body, value) == "payload"


def test_nested_settings_bodies_unset_or_null_or_repeated() -> None:
    """A PATCH body's nested limit may be absent (msgspec.UNSET), null, or hold a repeat."""
    from retsu.adapters.http.dto import UpdateQueueBody

    check = KeyCheck(UpdateQueueBody)
    for body in (b'{"max_in_flight": 3}', b'{"rate_limit": null}', b"{}"):
        assert check.repeated(body, msgspec.json.decode(body, type=UpdateQueueBody)) is None
    body = b'{"rate_limit": {"per_second": 1, "per_second": 2}}'
    assert check.repeated(body, msgspec.json.decode(body, type=UpdateQueueBody)) == "per_second"
