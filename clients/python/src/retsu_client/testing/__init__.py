"""Test without a server process: ``FakeRetsu`` runs the server's own application in
process, on its memory adapter and a clock you may move, and serves it to httpx through a
transport — the server's rules exactly, held to the same contract tests as a real
``retsu`` server (``clients/python/tests/test_contract_*.py``).

It needs the server's distribution: ``pip install 'retsu-client[testing]'`` (from this
repository: ``pip install -e . -e 'clients/python[testing]'``).

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

try:
    from retsu.adapters.memory.clock import ManualClock
except ModuleNotFoundError as missing:  # pragma: no branch - depends on the install
    if missing.name != "retsu":
        raise
    raise ImportError(
        "retsu_client.testing runs the Retsu server's own application, so it needs the "
        "server's distribution: pip install 'retsu-client[testing]' (from the Retsu "
        "repository: pip install -e . -e 'clients/python[testing]')",
        name="retsu",
    ) from missing

from retsu.adapters.system import SystemClock
from retsu.application.ports import Clock

from retsu_client.testing.fake import FAKE_URL, FakeRetsu, FakeToken, FakeTransport

__all__ = [
    "FAKE_URL",
    "Clock",
    "FakeRetsu",
    "FakeToken",
    "FakeTransport",
    "ManualClock",
    "SystemClock",
]
