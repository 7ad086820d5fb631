"""What the HTTP adapter needs from the rest of the program: use cases, readiness, metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.acknowledge import Acknowledge
from retsu.application.change_visibility import ChangeVisibility
from retsu.application.create_queue import CreateQueue
from retsu.application.delete_dead_letter import DeleteDeadLetter
from retsu.application.delete_queue import DeleteQueue
from retsu.application.dequeue import Dequeue
from retsu.application.enqueue import Enqueue
from retsu.application.enqueue_idempotent import EnqueueIdempotent
from retsu.application.get_dead_letter import GetDeadLetter
from retsu.application.get_queue import GetQueue
from retsu.application.list_audit_log import ListAuditLog
from retsu.application.list_dead_letters import ListDeadLetters
from retsu.application.list_queues import ListQueues
from retsu.application.pause_queue import PauseQueue, ResumeQueue
from retsu.application.purge_queue import PurgeQueue
from retsu.application.redrive_dead_letter import RedriveDeadLetter
from retsu.application.redrive_dead_letters import RedriveDeadLetters
from retsu.application.update_queue import UpdateQueue


@dataclass(frozen=True)
class ApiServices:
    create_queue: CreateQueue
    update_queue: UpdateQueue
    enqueue: Enqueue
    dequeue: Dequeue
    acknowledge: Acknowledge
    list_queues: ListQueues
    get_queue: GetQueue
    pause_queue: PauseQueue
    resume_queue: ResumeQueue
    purge_queue: PurgeQueue
    delete_queue: DeleteQueue
    enqueue_idempotent: EnqueueIdempotent
    change_visibility: ChangeVisibility
    list_dead_letters: ListDeadLetters
    get_dead_letter: GetDeadLetter
    redrive_dead_letter: RedriveDeadLetter
    redrive_dead_letters: RedriveDeadLetters
    delete_dead_letter: DeleteDeadLetter
    list_audit_log: ListAuditLog
    # Raises when the service cannot serve (the real one checks PostgreSQL).
    readiness: Callable[[], Awaitable[None]]
    metrics: Metrics
