"""The shared cache of queue details in Redis (SPEC §4), in front of another
``QueueDetails`` (the pass-through repository lookup).

Keys (``{…}`` is a Redis Cluster hash tag, so an entry and its marker share a slot):

- ``retsu:v1:queue:{<queue id>}``: the queue, msgpack (msgspec, array-like), for
  5 minutes; or msgpack ``nil`` for a queue that does not exist, for 5 seconds.
- ``retsu:v1:queue:{<queue id>}:loading``: the loading marker, ``SET NX PX 2000``.

On a miss, one process (the one that sets the marker) reads PostgreSQL and
stores the result; the others poll every 10 ms (``MGET`` of entry and marker)
and take the stored result, or read PostgreSQL themselves once the marker is
gone without a result or its lifetime has passed. Within one process, misses
for the same queue share one such round (single-flight).

A load stores with ``NX`` so it never overwrites what a write stored meanwhile;
``remember`` (create, update, pause, resume) overwrites; ``forget`` (delete)
overwrites with the negative entry.

Failures never reach the caller: a Redis error or timeout is logged
(rate-limited), the lookup falls back to the inner layer, and the circuit
breaker makes every later call skip Redis (no per-request timeout) until a
background reconnect attempt (PING) succeeds: the first after 1 s, backing off
to 5 s. Writes that could not reach Redis are remembered (bounded) and their
keys deleted on reconnect before the cache is used again, so an entry written
before the outage cannot outlive a change made during it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final
from uuid import UUID

import msgspec
from redis.asyncio import Redis

from retsu.adapters.cache.breaker import CircuitBreaker
from retsu.adapters.cache.local import SingleFlight
from retsu.adapters.cache.logs import RateLimitedLog, describe_error
from retsu.adapters.cache.metrics import (
    LOAD_ERROR,
    LOAD_NOT_FOUND,
    LOAD_SUCCESS,
    NO_CACHE_METRICS,
    QUEUE_DETAILS,
    CacheMetrics,
)
from retsu.application.ports import QueueDetails
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue, QueueSettings

log = logging.getLogger("retsu.adapters.redis")

KEY_PREFIX: Final = "retsu:v1:"
ENTRY_TTL_SECONDS: Final = 300.0
NEGATIVE_TTL_SECONDS: Final = 5.0
MARKER_TTL_SECONDS: Final = 2.0
POLL_INTERVAL_SECONDS: Final = 0.010
MAX_PENDING_INVALIDATIONS: Final = 10_000
_DELETE_BATCH: Final = 100


class _CachedQueue(msgspec.Struct, array_like=True, frozen=True):
    """A queue as stored in Redis (its ID is in the key). Field order is the format:
    change it only together with the key prefix version."""

    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool
    created_at: datetime
    updated_at: datetime


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(_CachedQueue | None)
NEGATIVE_ENTRY: Final = _ENCODER.encode(None)


class CorruptEntry(ValueError):
    """A cache value that does not decode to a queue (another version, or garbage)."""


def encode_queue(queue: Queue) -> bytes:
    return _ENCODER.encode(
        _CachedQueue(
            name=queue.name,
            visibility_timeout_seconds=queue.settings.visibility_timeout_seconds,
            max_delivery_attempts=queue.settings.max_delivery_attempts,
            default_message_ttl_seconds=queue.settings.default_message_ttl_seconds,
            paused=queue.paused,
            created_at=queue.created_at,
            updated_at=queue.updated_at,
        )
    )


def decode_entry(queue_id: UUID, raw: bytes | str) -> Queue | None:
    """The queue, or None for a negative entry. Raises CorruptEntry."""
    try:
        # The client never decodes responses, so values arrive as bytes.
        cached = _DECODER.decode(raw if isinstance(raw, bytes) else raw.encode())
        if cached is None:
            return None
        return Queue(
            id=queue_id,
            name=cached.name,
            settings=QueueSettings(
                visibility_timeout_seconds=cached.visibility_timeout_seconds,
                max_delivery_attempts=cached.max_delivery_attempts,
                default_message_ttl_seconds=cached.default_message_ttl_seconds,
            ),
            paused=cached.paused,
            created_at=cached.created_at,
            updated_at=cached.updated_at,
        )
    except Exception as error:  # msgspec errors, or settings out of range
        raise CorruptEntry(describe_error(error)) from None


# Store the loaded value unless a write got there first, then release our marker if it
# is still ours (a slow load may have outlived it). One round trip.
_STORE_AND_RELEASE: Final = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX')
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('DEL', KEYS[2])
end
return 1
"""
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class _NoResult(enum.Enum):
    NO_RESULT = enum.auto()


_NO_RESULT: Final = _NoResult.NO_RESULT


def _milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class RedisQueueDetails:
    """``QueueDetails`` through the shared Redis cache, falling back to ``inner``."""

    def __init__(
        self,
        redis: Redis,
        inner: QueueDetails,
        *,
        breaker: CircuitBreaker | None = None,
        metrics: CacheMetrics = NO_CACHE_METRICS,
        key_prefix: str = KEY_PREFIX,
        ttl_seconds: float = ENTRY_TTL_SECONDS,
        negative_ttl_seconds: float = NEGATIVE_TTL_SECONDS,
        marker_ttl_seconds: float = MARKER_TTL_SECONDS,
        poll_interval_seconds: float = POLL_INTERVAL_SECONDS,
        max_pending_invalidations: int = MAX_PENDING_INVALIDATIONS,
        timer: Callable[[], float] = time.perf_counter,
        failure_log: RateLimitedLog | None = None,
    ) -> None:
        self._redis = redis
        self._inner = inner
        self.breaker = breaker if breaker is not None else CircuitBreaker()
        self._metrics = metrics
        self._prefix = key_prefix
        self._ttl_ms = _milliseconds(ttl_seconds)
        self._negative_ttl_ms = _milliseconds(negative_ttl_seconds)
        self._marker_ttl_ms = _milliseconds(marker_ttl_seconds)
        self._marker_ttl = marker_ttl_seconds
        self._poll_interval = poll_interval_seconds
        self._max_pending = max_pending_invalidations
        self._timer = timer
        self._failure_log = failure_log if failure_log is not None else RateLimitedLog(log)
        self._flights: SingleFlight[UUID, Queue] = SingleFlight()
        self._store_script = redis.register_script(_STORE_AND_RELEASE)
        self._release_script = redis.register_script(_RELEASE)
        # Queues written while Redis was unreachable: their keys are deleted on reconnect.
        self._pending_invalidations: set[UUID] = set()
        self._pending_overflowed = False
        self._probe_task: asyncio.Task[None] | None = None
        self._closed = False

    # -- keys --------------------------------------------------------------------

    def key(self, queue_id: UUID) -> str:
        return f"{self._prefix}queue:{{{queue_id}}}"

    def marker_key(self, queue_id: UUID) -> str:
        return f"{self.key(queue_id)}:loading"

    # -- QueueDetails ------------------------------------------------------------

    async def details_of(self, queue_id: UUID) -> Queue:
        if not self._usable():
            self._metrics.cache_request(QUEUE_DETAILS, hit=False)
            return await self._load(queue_id)
        try:
            raw: bytes | str | None = await self._redis.get(self.key(queue_id))
        except Exception as error:
            self._failed("read", error)
            self._metrics.cache_request(QUEUE_DETAILS, hit=False)
            return await self._load(queue_id)
        if raw is not None:
            try:
                queue = decode_entry(queue_id, raw)
            except CorruptEntry as error:
                self._failure_log.warning("shared cache: dropping an unreadable entry (%s)", error)
                await self._delete_quietly(queue_id)
            else:
                self._metrics.cache_request(QUEUE_DETAILS, hit=True)
                if queue is None:
                    raise QueueNotFound(queue_id)
                return queue
        self._metrics.cache_request(QUEUE_DETAILS, hit=False)
        return await self._flights.run(queue_id, lambda: self._fill(queue_id))

    async def remember(self, queue: Queue) -> None:
        """Overwrite the entry (after a committed create or change). Never raises."""
        if not self._usable():
            self._invalidate_later(queue.id)
            return
        try:
            await self._redis.set(self.key(queue.id), encode_queue(queue), px=self._ttl_ms)
        except Exception as error:
            self._failed("write", error)
            self._invalidate_later(queue.id)

    async def forget(self, queue_id: UUID) -> None:
        """The queue is gone (after a committed delete). Never raises.

        Replaces the entry with the 5-second negative entry rather than deleting it, so
        a load that read the queue just before the delete committed cannot store it
        afterwards (its ``SET NX`` finds the key taken). Queue IDs are never reused, so
        the negative entry can never hide a queue.
        """
        self._flights.detach(queue_id)
        if not self._usable():
            self._invalidate_later(queue_id)
            return
        try:
            await self._redis.set(self.key(queue_id), NEGATIVE_ENTRY, px=self._negative_ttl_ms)
        except Exception as error:
            self._failed("delete", error)
            self._invalidate_later(queue_id)

    async def aclose(self) -> None:
        """Stop any reconnect attempt and close the client's connections."""
        self._closed = True
        probe, self._probe_task = self._probe_task, None
        if probe is not None:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
        try:
            await self._redis.aclose()
        except Exception as error:
            log.debug("closing the shared cache client failed: %s", describe_error(error))

    # -- the miss path -------------------------------------------------------------

    async def _fill(self, queue_id: UUID) -> Queue:
        """After a miss: load under the marker, or wait for whoever holds it."""
        if not self._usable():
            return await self._load(queue_id)
        token = secrets.token_hex(8)
        try:
            acquired = await self._redis.set(
                self.marker_key(queue_id), token, nx=True, px=self._marker_ttl_ms
            )
        except Exception as error:
            self._failed("lock", error)
            return await self._load(queue_id)
        if not acquired:
            found = await self._wait_for_loader(queue_id)
            if found is not _NO_RESULT:
                if found is None:
                    raise QueueNotFound(queue_id)
                return found
            token = ""  # we read PostgreSQL ourselves, holding no marker
        return await self._load_and_store(queue_id, token)

    async def _wait_for_loader(self, queue_id: UUID) -> Queue | _NoResult | None:
        """Poll for another process's result until its marker goes or its lifetime passes."""
        keys = (self.key(queue_id), self.marker_key(queue_id))
        deadline = self._timer() + self._marker_ttl
        while True:
            await asyncio.sleep(self._poll_interval)
            if not self._usable():
                return _NO_RESULT
            try:
                raw, marker = await self._redis.mget(keys)
            except Exception as error:
                self._failed("poll", error)
                return _NO_RESULT
            if raw is not None:
                try:
                    return decode_entry(queue_id, raw)
                except CorruptEntry:
                    return _NO_RESULT
            if marker is None or self._timer() >= deadline:
                return _NO_RESULT  # the loader failed, died, or is too slow

    async def _load_and_store(self, queue_id: UUID, token: str) -> Queue:
        try:
            queue = await self._load(queue_id)
        except QueueNotFound:
            await self._store(queue_id, NEGATIVE_ENTRY, self._negative_ttl_ms, token)
            raise
        except Exception:
            if token:
                await self._release(queue_id, token)
            raise
        await self._store(queue_id, encode_queue(queue), self._ttl_ms, token)
        return queue

    async def _store(self, queue_id: UUID, value: bytes, ttl_ms: int, token: str) -> None:
        if not self._usable():
            return
        try:
            await self._store_script(
                keys=[self.key(queue_id), self.marker_key(queue_id)], args=[value, ttl_ms, token]
            )
        except Exception as error:
            self._failed("write", error)

    async def _release(self, queue_id: UUID, token: str) -> None:
        if not self._usable():
            return
        try:
            await self._release_script(keys=[self.marker_key(queue_id)], args=[token])
        except Exception as error:
            self._failed("unlock", error)

    async def _delete_quietly(self, queue_id: UUID) -> None:
        try:
            await self._redis.delete(self.key(queue_id))
        except Exception as error:
            self._failed("delete", error)

    async def _load(self, queue_id: UUID) -> Queue:
        """Read the inner layer (PostgreSQL), timed for ``cache_load_duration_seconds``."""
        started = self._timer()
        outcome = LOAD_ERROR
        try:
            queue = await self._inner.details_of(queue_id)
            outcome = LOAD_SUCCESS
            return queue
        except QueueNotFound:
            outcome = LOAD_NOT_FOUND
            raise
        finally:
            self._metrics.cache_loaded(QUEUE_DETAILS, outcome, self._timer() - started)

    # -- outage handling -------------------------------------------------------------

    def _usable(self) -> bool:
        """Whether to use Redis now; while not, starts a due reconnect attempt."""
        if self.breaker.closed:
            return True
        if self._probe_task is None and not self._closed and self.breaker.try_probe():
            self._probe_task = asyncio.ensure_future(self._probe())
        return False

    def _failed(self, operation: str, error: Exception) -> None:
        opened = self.breaker.record_failure()
        retry = self.breaker.next_attempt_in or 0.0
        if opened:
            self._failure_log.warning(
                "shared cache unavailable (%s failed: %s); reading PostgreSQL directly, "
                "next reconnect attempt in %.1f s",
                operation,
                describe_error(error),
                retry,
            )
        else:
            self._failure_log.warning(
                "shared cache %s failed: %s", operation, describe_error(error)
            )

    def _invalidate_later(self, queue_id: UUID) -> None:
        if len(self._pending_invalidations) < self._max_pending:
            self._pending_invalidations.add(queue_id)
        elif not self._pending_overflowed:
            self._pending_overflowed = True
            log.warning(
                "shared cache: more than %d queues changed while Redis was unreachable; "
                "some cached details may stay stale for up to %d s after it returns",
                self._max_pending,
                self._ttl_ms // 1000,
            )

    async def _probe(self) -> None:
        """One reconnect attempt, in the background: no request waits for it."""
        try:
            await self._redis.ping()
            # Changes made while Redis was unreachable: drop their entries before the
            # cache is used again. Loops until none is left (writes keep arriving).
            while self._pending_invalidations:
                batch = list(self._pending_invalidations)[:_DELETE_BATCH]
                await self._redis.delete(*(self.key(queue_id) for queue_id in batch))
                self._pending_invalidations.difference_update(batch)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.breaker.record_failure()
            self._failure_log.warning(
                "shared cache reconnect attempt failed: %s; next attempt in %.1f s",
                describe_error(error),
                self.breaker.next_attempt_in or 0.0,
            )
        else:
            self._pending_overflowed = False
            if self.breaker.record_success():
                log.warning("shared cache reachable again; using it for queue details")
        finally:
            if self._probe_task is asyncio.current_task():
                self._probe_task = None

    # -- for tests and diagnostics --------------------------------------------------

    @property
    def pending_invalidations(self) -> frozenset[UUID]:
        return frozenset(self._pending_invalidations)
