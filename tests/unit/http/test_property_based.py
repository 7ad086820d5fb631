"""Property-based run of every operation against the served OpenAPI document (schemathesis).

The real app (the API container over the memory adapters) runs in-process over ASGI. For
each operation schemathesis generates requests from the document — valid and invalid — and
every answer must be no 5xx and conform to the document: a documented status, its content
type, its schema and its headers. Half the cases address a queue that exists (and a message
or dead letter of it), so the happy paths run too, not only ``404 queue_not_found``.

Bounded in time: a few examples per operation, no deadline (the machine is shared).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import schemathesis
from dependency_injector import providers
from hypothesis import HealthCheck, given, settings
from litestar import Litestar
from litestar.testing import TestClient
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from tests.support.containers import api_container

EXAMPLES_PER_OPERATION = 12
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


class World:
    """The app and what exists in it: one queue, a delivered message, a ready one and a
    dead letter."""

    def __init__(self) -> None:
        clock = ManualClock()
        repository = MemoryStorage(clock)
        metrics = Metrics()
        container = api_container(clock=clock, storage=repository, metrics=metrics)
        # Long polls end at once: each look at the clock is 100 s later than the last.
        jumps = itertools.count(step=100)
        container.core.monotonic.override(providers.Object(lambda: float(next(jumps))))
        self.app: Litestar = container.app()
        with TestClient(app=self.app) as client:
            queue = client.post("/v1/queues", json={"name": "fuzz", "max_delivery_attempts": 1})
            self.queue_id = queue.json()["id"]
            messages = f"/v1/queues/{self.queue_id}/messages"
            client.post(messages, json={"payload": "dead", "priority": "LOW"})
            client.post(messages + "/dequeue")
            clock.advance(3600)
            client.post(messages, json={"payload": "live", "priority": "HIGH"})
            # Moves the first to dead letters and delivers the second.
            self.message_id = client.post(messages + "/dequeue").json()["id"]
            letters = client.get(f"/v1/queues/{self.queue_id}/dead-letters").json()["items"]
            self.dead_letter_id = letters[0]["id"]
            client.post(messages, json={"payload": "ready", "priority": "MEDIUM"})


# Built once, at collection: the operations are read from the document it serves. (The
# schemathesis pytest plugin's lazy fixtures do not work with this pytest, so each operation
# runs its own hypothesis test.)
WORLD = World()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", WORLD.app)
OPERATIONS = sorted(
    result.ok().label for result in SCHEMA.get_all_operations() if result.ok() is not None
)


def test_every_operation_is_run() -> None:
    assert len(OPERATIONS) >= 19
    assert "POST /v1/queues/{queue_id}/messages" in OPERATIONS


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_answer_conforms_to_the_document(label: str) -> None:
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None
    world = World()  # each operation on its own world: a DELETE must not empty the next one
    turns = itertools.count()

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        parameters = case.path_parameters or {}
        if "queue_id" in parameters and next(turns) % 2 == 0:
            parameters["queue_id"] = world.queue_id
            if "message_id" in parameters:
                dead = "dead-letters" in case.path
                parameters["message_id"] = world.dead_letter_id if dead else world.message_id
        response = case.call(app=world.app)
        assert response.status_code < 500, (label, case.formatted_path, response.text)
        case.validate_response(response, checks=CHECKS)

    run()
