"""Test without a server: ``FakeRetsu`` serves the Retsu API from memory, through an httpx
transport, with the real server's rules — held to the same contract tests as a real
``retsu`` server (``clients/python/tests/test_contract_*.py``).

    from retsu_client import Client, Worker
    from retsu_client.testing import FakeRetsu, ManualClock

    fake = FakeRetsu(clock=ManualClock())
    with Client(transport=fake.transport()) as retsu:
        retsu.create_queue("emails", visibility_timeout_seconds=30)
        retsu.enqueue("emails", "hello")
        message = retsu.dequeue("emails")
        fake.clock.advance(31)                 # the lease ends: no sleeping
        assert retsu.dequeue("emails").delivery_attempts == 2
"""

from __future__ import annotations

from retsu_client.testing._server import FAKE_URL, FakeRetsu, FakeToken, FakeTransport
from retsu_client.testing.clock import Clock, ManualClock, SystemClock

__all__ = [
    "FAKE_URL",
    "Clock",
    "FakeRetsu",
    "FakeToken",
    "FakeTransport",
    "ManualClock",
    "SystemClock",
]
