"""``MemoryStorage``: every storage port in memory, in one object.

The in-process twin of the PostgreSQL adapter, held to the same contract suite
(``tests/contract``): the unit tests run the use cases and the HTTP app on it, and the
client's testing helper (``retsu_client.testing``) serves the real application on it. One
object serves every port, as one database serves every PostgreSQL port; each port's rules
live in the module named after it (``messages.py`` beside ``adapters/postgres/messages.py``).
"""

from __future__ import annotations

from retsu.adapters.memory.audit_log import AuditLogPart
from retsu.adapters.memory.browsing import BrowsingPart
from retsu.adapters.memory.consumers import ConsumersPart
from retsu.adapters.memory.database_health import DatabaseHealthPart
from retsu.adapters.memory.dead_letters import DeadLettersPart
from retsu.adapters.memory.history import HistoryPart
from retsu.adapters.memory.maintenance import MaintenancePart
from retsu.adapters.memory.messages import MessagesPart
from retsu.adapters.memory.queues import QueuesPart
from retsu.adapters.memory.schedules import SchedulesPart
from retsu.adapters.memory.state import StatePart


class MemoryStorage(
    QueuesPart,
    DeadLettersPart,
    MessagesPart,
    BrowsingPart,
    AuditLogPart,
    MaintenancePart,
    StatePart,
    ConsumersPart,
    HistoryPart,
    SchedulesPart,
    DatabaseHealthPart,
):
    """Implements QueueRepository, QueueStateReader, MessageRepository, MessageBrowser,
    DeadLetterRepository, AuditLog, Maintenance, ConsumerStore, ConsumerMaintenance,
    QueueHistoryReader, HistoryMaintenance, ScheduleRepository, ScheduleRunner and
    DatabaseHealthReader."""
