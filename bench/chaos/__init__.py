"""Chaos with accounting (issue 15, item 3): ``python -m bench.chaos``.

Starts a private topology on this machine — its own PostgreSQL cluster (initdb into a
temporary directory, on a free port), its own Redis, optionally its own PgBouncer in
transaction mode, ``retsu migrate``, two ``retsu api`` processes, both cleaners and two
state-metrics collectors — runs producers and consumers over HTTP with numbered
payloads while it injects faults in sequence (an API process killed with SIGKILL and
restarted, PostgreSQL restarted, PgBouncer restarted, Redis stopped for 20 s; opt-in:
the primary's machine lost and a streaming standby promoted), then
drains the queue and prints the accounting: acknowledged enqueues, deliveries, messages
lost, acknowledged messages delivered again, client errors by kind in each fault
window, time to ready after PostgreSQL returns, and whether the exact stats equal a
``count(*)``. Exits non-zero when an invariant fails.

It never touches a server it did not start: the machine's shared PostgreSQL and Redis
are left alone. See docs/operations.md ("Chaos with accounting").
"""
