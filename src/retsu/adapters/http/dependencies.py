"""What handlers take from the container, by name and type (Litestar's ``NamedDependency``).

A handler parameter named after a service and typed with its alias here gets that
service (``messages: Messages``); ``app.create_app`` provides each name once per app.
"""

from __future__ import annotations

from litestar.di import NamedDependency

from retsu.adapters.http.cursors import Cursors as CursorCodec
from retsu.application.activity import ActivityService
from retsu.application.browsing import BrowsingService
from retsu.application.database_health import DatabaseHealthService
from retsu.application.dead_letters import DeadLetterService
from retsu.application.messages import MessageService
from retsu.application.queues import QueueService
from retsu.application.schedules import ScheduleService

Queues = NamedDependency[QueueService]
Messages = NamedDependency[MessageService]
DeadLetters = NamedDependency[DeadLetterService]
Browsing = NamedDependency[BrowsingService]
Activity = NamedDependency[ActivityService]
Schedules = NamedDependency[ScheduleService]
Health = NamedDependency[DatabaseHealthService]
Cursors = NamedDependency[CursorCodec]
