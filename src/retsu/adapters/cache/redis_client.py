"""The redis-py asyncio client of the shared cache, built from configuration."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def create_redis_client(
    url: str, *, connection_timeout_seconds: float, command_timeout_seconds: float
) -> Redis:
    """A lazily connecting client (nothing happens until the first command).

    redis-py retries failed commands by default; here it must not: the circuit
    breaker of the shared cache decides when to try Redis again, so a request
    pays at most one command timeout.
    """
    return Redis.from_url(
        url,
        socket_connect_timeout=connection_timeout_seconds,
        socket_timeout=command_timeout_seconds,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        health_check_interval=0,
        socket_keepalive=True,
    )
