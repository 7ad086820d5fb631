"""Closing the cache layers on shutdown (the shared cache holds Redis connections)."""

from __future__ import annotations

import contextlib
from typing import Protocol, runtime_checkable


@runtime_checkable
class _Closeable(Protocol):
    async def aclose(self) -> None: ...


async def close_layers(*layers: object) -> None:
    """``aclose()`` every layer that has one, once each; never raises."""
    seen: set[int] = set()
    for layer in layers:
        if id(layer) in seen or not isinstance(layer, _Closeable):
            continue
        seen.add(id(layer))
        with contextlib.suppress(Exception):
            await layer.aclose()
