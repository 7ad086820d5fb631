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
  come back to us; they are skipped.
* migration 0004's trigger, for queue changes (paused changed, queue deleted), made by
  any process.

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
# One statement, so one round trip and its own transaction: set_config(…, true) turns
# synchronous_commit off for this transaction only (a lost hint is harmless).
NOTIFY_SQL = (
    "SELECT set_config('synchronous_commit', 'off', true), "
    f"count(pg_notify('{CHANNEL}', payload)) FROM unnest($1::text[]) AS payload"
)


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
        """Wake every waiter (they answer empty) and close the connection."""
        self.close()
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
        self._listening.set()
        # Notifications sent while nobody listened are lost: every waiter looks again.
        self.signal_all()
        self._attention.set()  # send what was announced meanwhile
        loop = asyncio.get_running_loop()
        last_sent = -self._notify_interval
        while True:
            try:
                async with asyncio.timeout(self._probe_interval):
                    await self._attention.wait()
            except TimeoutError:
                await connection.fetchval("SELECT 1", timeout=self._connect_timeout)
                continue
            self._attention.clear()
            if lost:
                raise ConnectionError("the LISTEN connection was closed")
            if self._announced:
                pause = last_sent + self._notify_interval - loop.time()
                if pause > 0:
                    await asyncio.sleep(pause)  # let more announcements join this batch
                last_sent = loop.time()
                batch, self._announced = self._announced, {}
                payloads = [
                    str(queue_id) if changed else f"{queue_id}{MESSAGES_SUFFIX}"
                    for queue_id, changed in batch.items()
                ]
                try:
                    await connection.fetchval(NOTIFY_SQL, payloads, timeout=self._connect_timeout)
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

    def _restore(self, batch: dict[UUID, bool]) -> None:
        for queue_id, changed in batch.items():
            self._announced[queue_id] = self._announced.get(queue_id, False) or changed
