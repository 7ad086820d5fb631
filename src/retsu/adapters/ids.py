"""UUIDv7: time-ordered identifiers (RFC 9562), so ids sort by creation time."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_last_counter = 0


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """A UUIDv7 that is strictly increasing within this process.

    The 12-bit ``rand_a`` field carries a counter seeded randomly each millisecond
    (RFC 9562 method 1), so ids made in the same millisecond keep their order.
    """
    global _last_ms, _last_counter
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            _last_counter += 1
            if _last_counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms += 1
                _last_counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            _last_counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = ms
        counter = _last_counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand_b
    return uuid.UUID(int=value)
