"""Message signals over PostgreSQL: one LISTEN/NOTIFY connection per process.

Every API process keeps ONE dedicated asyncpg connection (not a pool connection:
LISTEN belongs to a session, and a pool would hand the session to others) that
LISTENs on ``retsu_messages`` and wakes this process's long polls waiting on the
queue named in each payload. A waiting poll costs no database work at all.

Who notifies:

* this process, for its own changes (``announce``, called after the commit of an
  enqueue, a redrive or a lease release): the local waiters are woken at once, and
  the queue id is queued for a NOTIFY to the other processes. The NOTIFY is sent on
  the same dedicated connection, in its own tiny transaction, batched (every queue
  announced since the previous send, de-duplicated; at most one send per 5 ms) and
  with ``synchronous_commit`` off, so it never waits for a WAL flush and never touches
  the enqueue's transaction. (A NOTIFY inside the enqueue transaction serialises all
  enqueue commits on PostgreSQL's notify lock — measured at −45 to −85 % enqueue
  throughput with 8 connections, see docs/long-polling.md.) Our own notifications
  come back to us; they are skipped. A queue's messages are announced only when another
  process has a fresh ``queue_waiter`` row for it (below), read by the NOTIFY statement
  itself: that statement runs after the change committed, so a row it does not see is
  committed after the change, and that process's waiters claim again once their row is
  committed — they find the change then. Nothing is lost, and a queue nobody waits on
  elsewhere costs no notification, no wake-up of every listener (measured: single
  enqueue +2.5–3 % over HTTP with 2 API processes). Changes of the queue itself (paused,
  deleted) are always sent.
* migration 0004's trigger, for queue changes (paused changed, queue deleted), made by
  any process.
* ``retsu.enqueue`` / ``retsu.acknowledge`` (the SQL interface, migrations 0012-0013),
  inside their caller's transaction, delivered at its commit — but only for a queue with
  a fresh ``queue_waiter`` row, because such a NOTIFY puts the caller's commit behind the
  notify lock.

Registering waiting polls (``queue_waiter``, migration 0013). This connection also keeps
the process's rows there, from ``WaiterRegistry``: a queue is registered when its first
long poll starts to wait (not for polls a claim answers at once), its ``seen_at``
refreshed every ``WAITER_REFRESH_SECONDS`` while any waits, and deleted
``WAITER_LINGER_SECONDS`` after the last one ended (a consumer loop that waits now and
then keeps its row instead of churning it). Each change is one statement of its own
(upserts, deletes, and other processes' long-dead rows, batched), never a write per
dequeue. After a queue's row is committed its waiters are signalled, so they claim once
more: an SQL enqueue that checked before the row existed either committed before that
claim (found by it) or is found at the waiter's next re-check (≤ 1 s) — the one window
the rows leave, see migration 0013. The rows say "this process listens", so they are
written before LISTEN is announced ready after a reconnect, and deleted on a clean stop;
a crashed process's rows stop counting after migration 0013's 30 s and only cost
notifications nobody hears until then.

Correctness never depends on this connection: waiters re-check at least once a
second. If it drops (the session was killed, the database restarted), the adapter
reconnects at once and then with backoff while that fails (0.1 s doubling to 5 s, with
jitter: tenacity), then wakes every local waiter so it claims again (notifications sent
meanwhile are lost) and sends the announcements that piled up. A connection that drops
again before it was up for ``STABLE_SECONDS`` counts as a failed attempt, so a flapping
server is not hammered. A ``SELECT 1`` every 30 s notices a connection that died
silently. The URL may name several hosts (``hosts.py``): after a failover the connection
is made again to whichever became the primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg
import tenacity

from retsu.adapters.postgres.errors import broken_connection
from retsu.adapters.postgres.hosts import PostgresHosts
from retsu.adapters.signals import InProcessMessageSignals

log = logging.getLogger("retsu.adapters.postgres.notifications")

CHANNEL = "retsu_messages"
# Payloads: "<queue id>:messages" (announced by an API process: a message may be
# deliverable) or a bare "<queue id>" (migration 0004's trigger: the queue itself
# changed — resumed, paused, deleted).
MESSAGES_SUFFIX = ":messages"
# A connection that lasted this long was healthy: the next reconnect starts fast again.
STABLE_SECONDS = 10.0

# At most one NOTIFY transaction per this interval per process: sporadic announcements
# go out at once; under a stream of enqueues they are batched (a few ms of latency
# instead of one notify transaction — and one wake-up of every listener — per enqueue).
NOTIFY_INTERVAL_SECONDS = 0.005
# queue_waiter (migration 0013): a row younger than this counts (WAITER_FRESH_SECONDS
# there; the rows are refreshed every WAITER_REFRESH_SECONDS below).
WAITER_FRESH_SECONDS = 30
# One statement, so one round trip and its own transaction: set_config(…, true) turns
# synchronous_commit off for this transaction only (a lost hint is harmless). "Messages"
# payloads go only to queues another process has a fresh queue_waiter row for: nobody
# else waits on the others (see the module docstring, "Who notifies"). $1 payloads, $2 the
# queue ids as text (a uuid[] parameter costs type introspection), $3 whether the queue
# itself changed (always sent), $4 this process's name in queue_waiter.
NOTIFY_SQL = f"""
SELECT set_config('synchronous_commit', 'off', true),
       count(pg_notify('{CHANNEL}', p.payload))
FROM unnest($1::text[], $2::text[], $3::boolean[]) AS p(payload, queue_id, changed)
WHERE p.changed OR EXISTS (
    SELECT FROM queue_waiter AS w
    WHERE w.queue_id = p.queue_id::uuid AND w.process <> $4
      AND w.seen_at > now() - make_interval(secs => {WAITER_FRESH_SECONDS}))
"""


# queue_waiter (migration 0013): a registered queue's row is refreshed this often while
# polls wait on it (migration 0013 counts a row for WAITER_FRESH_SECONDS = 30: three
# refreshes), and deleted this long after its last waiter ended.
WAITER_REFRESH_SECONDS = 10.0
WAITER_LINGER_SECONDS = 5.0
# Other processes' rows this old are deleted by whichever process writes next (a crashed
# process's: they stopped counting long before).
WAITER_FORGET_SECONDS = 120
# One statement: this process's rows upserted (queues that still exist: a queue deleted
# meanwhile cascades its rows) and deleted, and long-dead rows of others taken (SKIP
# LOCKED: processes cleaning at once never wait on each other). Own rows are left out of
# the last part, so no row is changed twice. synchronous_commit off: the table is
# unlogged, nothing to wait for. Queue ids go as text[]: a uuid[] parameter costs three
# type-introspection queries on the connection's first use (measured).
WAITERS_SQL = """
WITH kept AS (
    INSERT INTO queue_waiter AS w (queue_id, process, seen_at)
    SELECT q.id, $1, now() FROM queue AS q WHERE q.id = ANY($2::text[]::uuid[])
    ON CONFLICT (queue_id, process) DO UPDATE SET seen_at = excluded.seen_at
    RETURNING 1
), dropped AS (
    DELETE FROM queue_waiter AS w WHERE w.process = $1 AND w.queue_id = ANY($3::text[]::uuid[])
    RETURNING 1
), forgotten AS (
    DELETE FROM queue_waiter AS w
    WHERE (w.queue_id, w.process) IN (
        SELECT o.queue_id, o.process FROM queue_waiter AS o
        WHERE o.process <> $1 AND o.seen_at < now() - make_interval(secs => $4)
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT set_config('synchronous_commit', 'off', true),
       (SELECT count(*) FROM kept) AS kept, (SELECT count(*) FROM dropped) AS dropped,
       (SELECT count(*) FROM forgotten) AS forgotten
"""


def process_name() -> str:
    """This API process in ``queue_waiter``: host, pid and a random part (a pid is reused,
    in containers at once)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True)
class WaiterSync:
    """What one statement tells ``queue_waiter``."""

    keep: list[UUID]  # upserted: queues with waiting polls, or lingering after them
    drop: list[UUID]  # deleted: no waiter for WAITER_LINGER_SECONDS (or shutting down)
    new: list[UUID]  # of ``keep``, not registered before: their waiters claim again after


class WaiterRegistry:
    """Which queues this process has waiting long polls on, and when ``queue_waiter`` must
    hear of it. Pure bookkeeping on a monotonic clock given by the caller (no I/O)."""

    def __init__(
        self,
        *,
        refresh_seconds: float = WAITER_REFRESH_SECONDS,
        linger_seconds: float = WAITER_LINGER_SECONDS,
    ) -> None:
        self.refresh_seconds = refresh_seconds
        self._linger = linger_seconds
        self._waiting: dict[UUID, int] = {}  # queue → polls waiting on it now
        self._idle_since: dict[UUID, float] = {}  # rows kept after their last waiter
        self._registered: set[UUID] = set()  # written in the last statement
        self._synced_at: float | None = None

    def started(self, queue_id: UUID, now: float) -> bool:
        """A poll started waiting; True when a row must be written now."""
        self._waiting[queue_id] = self._waiting.get(queue_id, 0) + 1
        self._idle_since.pop(queue_id, None)
        return queue_id not in self._registered

    def ended(self, queue_id: UUID, now: float) -> bool:
        """A poll that had waited ended; True when that left its queue without waiters
        (its row is to be deleted after the linger)."""
        left = self._waiting.get(queue_id, 0) - 1
        if left > 0:
            self._waiting[queue_id] = left
            return False
        self._waiting.pop(queue_id, None)
        self._idle_since[queue_id] = now
        return True

    @property
    def has_rows(self) -> bool:
        """Whether rows of this process may exist (written, or lingering)."""
        return bool(self._registered or self._idle_since)

    @property
    def registered(self) -> frozenset[UUID]:
        """The queues whose rows the last statement wrote (and no later one deleted)."""
        return frozenset(self._registered)

    def due(self, now: float, *, closing: bool = False) -> float | None:
        """Seconds until a statement is due (0: now); None while there is nothing to keep
        or delete."""
        if closing:
            return 0.0 if self.has_rows else None
        if any(queue_id not in self._registered for queue_id in self._waiting):
            return 0.0
        moments = [since + self._linger for since in self._idle_since.values()]
        if self._waiting or self._idle_since:
            moments.append(
                now if self._synced_at is None else self._synced_at + self.refresh_seconds
            )
        return max(0.0, min(moments) - now) if moments else None

    def plan(self, now: float, *, closing: bool = False) -> WaiterSync:
        if closing:
            drop = set(self._registered) | set(self._idle_since)
            return WaiterSync(keep=[], drop=sorted(drop), new=[])
        drop = {q for q, since in self._idle_since.items() if now - since >= self._linger}
        keep = {*self._waiting, *(q for q in self._idle_since if q not in drop)}
        new = [q for q in self._waiting if q not in self._registered]
        return WaiterSync(keep=sorted(keep), drop=sorted(drop), new=new)

    def synced(self, sync: WaiterSync, now: float) -> None:
        """The statement of ``sync`` ran (or failed for good: it is tried again at the next
        refresh rather than at once, so a refusing server is not hammered)."""
        for queue_id in sync.drop:
            self._idle_since.pop(queue_id, None)
        self._registered = set(sync.keep)
        self._synced_at = now

    def forget(self) -> None:
        """The connection was lost: everything is written again on the next one."""
        self._registered = set()
        self._synced_at = None


class PostgresMessageSignals(InProcessMessageSignals):
    """Implements MessageSignals for the API role; ``start()``/``stop()`` with the app."""

    def __init__(
        self,
        url: str,
        *,
        application_name: str = "retsu-listen",
        connect_timeout_seconds: float = 5.0,
        reconnect_initial_seconds: float = 0.1,
        reconnect_max_seconds: float = 5.0,
        probe_interval_seconds: float = 30.0,
        notify_interval_seconds: float = NOTIFY_INTERVAL_SECONDS,
        waiter_refresh_seconds: float = WAITER_REFRESH_SECONDS,
        waiter_linger_seconds: float = WAITER_LINGER_SECONDS,
    ) -> None:
        super().__init__()
        # Every host of the URL (several: the primary is whichever accepts the session).
        self._hosts = PostgresHosts(url)
        self._application_name = application_name
        self._connect_timeout = connect_timeout_seconds
        self._reconnect_initial = reconnect_initial_seconds
        self._reconnect_max = reconnect_max_seconds
        self._probe_interval = probe_interval_seconds
        self._notify_interval = notify_interval_seconds
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        # Something for the connection task to do: announcements to send, or it was lost.
        self._attention = asyncio.Event()
        # Queue id → whether the queue itself changed, announced since the last NOTIFY.
        self._announced: dict[UUID, bool] = {}
        self._own_pid: int | None = None
        # The queues with waiting polls, for queue_waiter; this process's name there.
        self._waiters = WaiterRegistry(
            refresh_seconds=waiter_refresh_seconds, linger_seconds=waiter_linger_seconds
        )
        self.process = process_name()
        self._rows_deleted = asyncio.Event()  # on a clean stop
        # How many times the connection was (re)established; for tests and logs.
        self.connections = 0

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up (else waiters rely on re-checks)."""
        return self._listening.is_set()

    def announce(self, queue_id: UUID, *, queue_changed: bool = False) -> None:
        self.signal(queue_id, queue_changed=queue_changed)
        if self._task is not None:  # not started (a worker role): nobody to tell
            self._announced[queue_id] = self._announced.get(queue_id, False) or queue_changed
            self._attention.set()

    @property
    def registered(self) -> frozenset[UUID]:
        """The queues this process's ``queue_waiter`` rows name (as last written)."""
        return self._waiters.registered

    def _waiting_started(self, queue_id: UUID) -> None:
        if self._waiters.started(queue_id, self._now()) and self._task is not None:
            self._attention.set()  # a row to write now

    def _waiting_ended(self, queue_id: UUID) -> None:
        if self._waiters.ended(queue_id, self._now()) and self._task is not None:
            self._attention.set()  # the connection's task times the row's deletion

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def start(self) -> None:
        """Start listening; waits for the first connection up to the connect timeout,
        then carries on without it (waiters re-check every second meanwhile)."""
        if self._task is not None:
            return
        self._listening = asyncio.Event()
        self._attention = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="retsu-listen")
        try:
            async with asyncio.timeout(self._connect_timeout):
                await self._listening.wait()
        except TimeoutError:
            log.warning(
                "message notifications are not connected yet; long polls re-check every "
                "second until they are"
            )

    async def stop(self) -> None:
        """Wake every waiter (they answer empty), delete this process's ``queue_waiter``
        rows (waiting at most a second for it: rows left behind only cost notifications
        until they age out) and close the connection."""
        self.close()
        if self._task is not None and self.listening and self._waiters.has_rows:
            self._attention.set()  # closed: the task deletes them all
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._rows_deleted.wait()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_notification(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        if pid == self._own_pid:
            return  # our own announcement: the local waiters were woken already
        queue_changed = not payload.endswith(MESSAGES_SUFFIX)
        try:
            queue_id = UUID(payload.removesuffix(MESSAGES_SUFFIX))
        except ValueError:
            log.debug("ignoring a notification that names no queue")
            return
        self.signal(queue_id, queue_changed=queue_changed)

    async def _run(self) -> None:
        while True:
            retrying = tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception_type(Exception),
                wait=tenacity.wait_exponential(
                    multiplier=self._reconnect_initial, max=self._reconnect_max
                )
                + tenacity.wait_random(0, self._reconnect_initial),
                before_sleep=self._log_reconnect,
            )
            # Returns after losing a connection that had been up for STABLE_SECONDS: the
            # next connect starts again at once, with a fresh backoff.
            await retrying(self._listen_until_lost)

    @staticmethod
    def _log_reconnect(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "message notifications: not connected (%s); retrying in %.1f s; long polls "
            "re-check every second meanwhile",
            type(error).__name__,
            wait,
        )

    async def _listen_until_lost(self) -> None:
        """Connect, LISTEN and serve until the connection is lost. Raises when it cannot
        connect, or when the connection was lost before it was up for STABLE_SECONDS."""
        loop = asyncio.get_running_loop()
        connection = await self._hosts.connect(
            timeout=self._connect_timeout,
            server_settings={"application_name": self._application_name},
        )
        connected_at = loop.time()
        try:
            await self._serve(connection)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the connection broke: reconnect
            if loop.time() - connected_at < STABLE_SECONDS:
                raise
            log.warning(
                "message notifications: connection lost (%s); reconnecting; long polls "
                "re-check every second until it is back",
                type(error).__name__,
            )
        finally:
            self._listening.clear()
            self._own_pid = None
            self._waiters.forget()  # written again on the next connection
            connection.terminate()

    async def _serve(self, connection: Any) -> None:
        lost = False

        def on_lost(_connection: Any) -> None:
            nonlocal lost
            lost = True
            self._attention.set()

        connection.add_termination_listener(on_lost)
        self._own_pid = connection.get_server_pid()
        await connection.add_listener(CHANNEL, self._on_notification)
        self.connections += 1
        if self.connections > 1:
            log.info("message notifications: listening again")
        loop = asyncio.get_running_loop()
        # The rows of the polls waiting already (after a reconnect), before they are told
        # to look again: an SQL enqueue from now on announces itself.
        if self._waiters.due(loop.time(), closing=self.closed) is not None:
            await self._sync_waiters(connection)
        self._listening.set()
        # Notifications sent while nobody listened are lost: every waiter looks again.
        self.signal_all()
        self._attention.set()  # send what was announced meanwhile
        last_sent = -self._notify_interval
        last_used = loop.time()  # a statement proves the connection as well as a probe
        while True:
            now = loop.time()
            timeout = last_used + self._probe_interval - now
            due = self._waiters.due(now, closing=self.closed)
            if due is not None:
                timeout = min(timeout, due)
            if timeout > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._attention.wait()
            self._attention.clear()
            if lost:
                raise ConnectionError("the LISTEN connection was closed")
            if self._waiters.due(loop.time(), closing=self.closed) == 0:
                await self._sync_waiters(connection)
                last_used = loop.time()
            if loop.time() - last_used >= self._probe_interval:
                await connection.fetchval("SELECT 1", timeout=self._connect_timeout)
                last_used = loop.time()
            if self._announced:
                last_used = loop.time()
                pause = last_sent + self._notify_interval - loop.time()
                if pause > 0:
                    await asyncio.sleep(pause)  # let more announcements join this batch
                last_sent = loop.time()
                batch, self._announced = self._announced, {}
                ids = [str(queue_id) for queue_id in batch]
                changed = list(batch.values())
                payloads = [
                    queue_id if change else f"{queue_id}{MESSAGES_SUFFIX}"
                    for queue_id, change in zip(ids, changed, strict=True)
                ]
                try:
                    await connection.fetchval(
                        NOTIFY_SQL,
                        payloads,
                        ids,
                        changed,
                        self.process,
                        timeout=self._connect_timeout,
                    )
                except asyncpg.PostgresError as error:
                    # Lost, or useless: a server that turned read-only refuses every
                    # NOTIFY (the primary demoted under us): reconnect, to the new one.
                    if lost or connection.is_closed() or broken_connection(error) is not None:
                        self._restore(batch)  # sent after reconnecting
                        raise
                    # The server refused (e.g. its notification queue is full because some
                    # listener stopped reading): the connection is fine, the hint is lost,
                    # other processes' waiters find the messages at their next re-check.
                    log.warning(
                        "message notifications: NOTIFY failed (%s); other API processes "
                        "will find the messages at their next re-check",
                        error.sqlstate,
                    )
                except BaseException:
                    self._restore(batch)  # sent after reconnecting
                    raise

    async def _sync_waiters(self, connection: Any) -> None:
        """One statement bringing this process's ``queue_waiter`` rows up to date; then
        the waiters of newly registered queues claim once more (see the module's doc)."""
        loop = asyncio.get_running_loop()
        sync = self._waiters.plan(loop.time(), closing=self.closed)
        written = False
        for attempt in range(2):
            try:
                await connection.fetchrow(
                    WAITERS_SQL,
                    self.process,
                    [str(queue_id) for queue_id in sync.keep],
                    [str(queue_id) for queue_id in sync.drop],
                    WAITER_FORGET_SECONDS,
                    timeout=self._connect_timeout,
                )
                written = True
                break
            except asyncpg.ForeignKeyViolationError:
                # A queue deleted between the statement's read of it and its insert: once
                # more, and the read no longer finds it.
                if attempt == 0:
                    continue
                log.warning(
                    "message notifications: waiting long polls not registered (a queue "
                    "kept vanishing); tried again in %.0f s",
                    self._waiters.refresh_seconds,
                )
            except asyncpg.PostgresError as error:
                if connection.is_closed() or broken_connection(error) is not None:
                    raise  # reconnect (the rows are written again then)
                log.warning(
                    "message notifications: waiting long polls not registered (%s); SQL "
                    "enqueues reach them at their next re-check; tried again in %.0f s",
                    error.sqlstate,
                    self._waiters.refresh_seconds,
                )
                break
        self._waiters.synced(sync, loop.time())
        if self.closed and not self._waiters.has_rows:
            self._rows_deleted.set()
        if written:
            for queue_id in sync.new:
                self.signal(queue_id)

    def _restore(self, batch: dict[UUID, bool]) -> None:
        for queue_id, changed in batch.items():
            self._announced[queue_id] = self._announced.get(queue_id, False) or changed
