"""Every PostgreSQL storage port over one engine, for integration tests.

Built as the containers build them, minus telemetry and long-poll announcements:
``storage.messages.enqueue(...)``, ``storage.queues.add_queue(...)``.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.audit_log import PostgresAuditLog
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.dead_letters import PostgresDeadLetters
from retsu.adapters.postgres.leadership import AdvisoryLockLeadership
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.messages import PostgresMessages
from retsu.adapters.postgres.queues import PostgresQueues
from retsu.adapters.postgres.secrets import PostgresServerSecrets
from retsu.adapters.postgres.state import PostgresQueueState


class PostgresStorage:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.database = Database(engine)
        self.queues = PostgresQueues(self.database)
        self.messages = PostgresMessages(self.database)
        self.dead_letters = PostgresDeadLetters(self.database)
        self.audit_log = PostgresAuditLog(self.database)
        self.state = PostgresQueueState(self.database)
        self.maintenance = PostgresMaintenance(self.database)
        self.leadership = AdvisoryLockLeadership(self.database)
        self.secrets = PostgresServerSecrets(self.database)
