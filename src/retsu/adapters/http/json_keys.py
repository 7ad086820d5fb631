"""Repeated keys in a JSON request body (SPEC §3.1: ``400 invalid_json``).

msgspec, like most parsers, keeps the last of repeated keys and has no option to refuse
them (msgspec issue 648, open). Python's json module with ``object_pairs_hook`` sees every
key but costs ~6x msgspec's decode: 4.4 µs on the benchmark's one-message enqueue body,
1.4 ms with a 500 KB payload. So the check is msgspec again, decoding the body to
``{_Key: Raw}``: it calls back once per key (keys unescaped: ``"p\\u0061yload"`` is
``payload``) and skips the values without decoding them — 2.0 µs and 0.14 ms.

A batch's entries are 100 objects: the same callback per key there cost 135 µs, ~6x the
decode. Instead, each field name is counted in the body (C-speed ``bytes.count``): without
an escaped name, ``"ttl_seconds"`` appears once per entry that holds a value for it, and
more often only when a key is repeated, given as ``null``, or the name is a string value.
Only then are the entries decoded key by key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from msgspec import inspect

__all__ = ["KeyCheck"]


class _Key:
    """A key as decoded here: equal only to itself, so a dict of them keeps every member
    of the object, repeated names included."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _key(kind: type, name: object) -> _Key:
    return _Key(str(name))


_OBJECT: Final = msgspec.json.Decoder(dict[_Key, msgspec.Raw], dec_hook=_key)
_OBJECTS: Final = msgspec.json.Decoder(list[dict[_Key, msgspec.Raw]], dec_hook=_key)
# An escape that could spell a field name's character (``_`` is 5F, a-z are 61-7A).
_ESCAPED_NAME_CHARACTER: Final = re.compile(rb"\\u00[5-7]")


@dataclass(frozen=True, slots=True)
class _Entries:
    """A field holding objects: a list of Structs, or one Struct."""

    attribute: str
    name: str  # as in JSON
    many: bool
    # Each field of the entries' Struct: (attribute, '"name"' as bytes, required).
    fields: tuple[tuple[str, bytes, bool], ...]


class KeyCheck:
    """Finds a key repeated in one object of a body that decoded into the Struct ``kind``."""

    def __init__(self, kind: Any) -> None:
        info = inspect.type_info(kind)
        self.entries: list[_Entries] = []
        if not isinstance(info, inspect.StructType):
            return
        for field in info.fields:
            value = field.type
            if isinstance(value, inspect.UnionType):  # X | None (msgspec.UNSET is not listed)
                kinds = [t for t in value.types if not isinstance(t, inspect.NoneType)]
                value = kinds[0] if len(kinds) == 1 else value
            many = isinstance(value, inspect.ListType)
            item = value.item_type if isinstance(value, inspect.ListType) else value
            if isinstance(item, inspect.StructType):
                fields = tuple(
                    (f.name, b'"%s"' % f.encode_name.encode(), f.required) for f in item.fields
                )
                self.entries.append(_Entries(field.name, field.encode_name, many, fields))

    def repeated(self, body: bytes, value: Any) -> str | None:
        """The first key repeated in one object of ``body`` (which decoded to ``value``)."""
        members = _OBJECT.decode(body)
        if len({key.name for key in members}) < len(members):
            return _first_repeated(members)
        for entries in self.entries:
            held = getattr(value, entries.attribute)
            if held is None or held is msgspec.UNSET:
                continue
            items: Sequence[Any] = held if entries.many else (held,)
            if _each_name_once(body, items, entries.fields):
                continue
            raw = next((raw for key, raw in members.items() if key.name == entries.name), None)
            if raw is None:  # the value came from elsewhere (a default)
                continue
            for inner in _OBJECTS.decode(raw) if entries.many else [_OBJECT.decode(raw)]:
                if len({key.name for key in inner}) < len(inner):
                    return _first_repeated(inner)
        return None


def _each_name_once(
    body: bytes, items: Sequence[Any], fields: tuple[tuple[str, bytes, bool], ...]
) -> bool:
    """Whether each field name appears in ``body`` exactly once per item holding a value
    for it (then no item repeats a key; see the module docstring)."""
    if _ESCAPED_NAME_CHARACTER.search(body) is not None:
        return False
    for attribute, quoted, required in fields:
        holding = (
            len(items)
            if required
            else len(items) - [getattr(item, attribute) for item in items].count(None)
        )
        if body.count(quoted) != holding:
            return False
    return True


def _first_repeated(members: dict[_Key, Any]) -> str:
    seen: set[str] = set()
    for key in members:
        if key.name in seen:
            return key.name
        seen.add(key.name)
    raise AssertionError("no key is repeated")
