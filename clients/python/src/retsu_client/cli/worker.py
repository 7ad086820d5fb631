"""``retsu-worker package.module:handler --queue NAME``: run a handler over a queue.

The handler takes one argument, the message (``id``, ``payload``, ``priority``,
``delivery_attempts``, ``enqueued_at``, ``json()``), and may be ``async``. SIGTERM or
SIGINT stops it gracefully (see ``retsu_client.worker``); the exit status is then 0.
It is 1 when the worker cannot start or is stopped by an error (unknown queue, refused
token), 2 for a usage error (including a handler that cannot be imported).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from retsu_client.aio import AsyncClient
from retsu_client.cli.common import CONNECTION_HELP, connection_options, print_error
from retsu_client.errors import RetsuError
from retsu_client.logs import configure
from retsu_client.worker import Handler, Worker

log = logging.getLogger("retsu_client.worker")


def load_handler(spec: str) -> Handler:
    """``package.module:attribute`` (the attribute may be dotted) → the callable."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected package.module:handler, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the working directory's modules
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r}: {error}") from error
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retsu-worker",
        description="Consume a Retsu queue with a handler function. " + CONNECTION_HELP,
        parents=[connection_options(suppress=False)],
    )
    parser.add_argument("handler", help="package.module:function (may be async)")
    parser.add_argument("--queue", required=True, help="queue name or id")
    parser.add_argument("--concurrency", type=int, default=1, help="handlers at once (1)")
    parser.add_argument(
        "--prefetch",
        type=int,
        help="messages held at most, fetched in batches (default: adaptive, fetching ahead "
        "of fast handlers up to concurrency + 200, not ahead of slow ones)",
    )
    parser.add_argument("--wait-seconds", type=int, default=20, help="long poll (0-20, 20)")
    parser.add_argument("--visibility-timeout", type=int, help="lease per delivery (queue's)")
    parser.add_argument(
        "--max-extension", type=float, default=3600.0, help="extend a lease for at most (3600 s)"
    )
    parser.add_argument("--retry-base", type=float, default=1.0, help="backoff base (1 s)")
    parser.add_argument("--retry-cap", type=float, default=300.0, help="backoff cap (300 s)")
    parser.add_argument(
        "--grace", type=float, default=30.0, help="seconds handlers get on shutdown (30)"
    )
    parser.add_argument("--consumer-name", help="Retsu-Consumer name (host:pid:random)")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics here")
    parser.add_argument("--metrics-addr", default="127.0.0.1")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    return parser


async def serve(args: argparse.Namespace, handler: Handler) -> int:
    metrics = None
    if args.metrics_port is not None:
        from retsu_client.metrics import WorkerMetrics

        metrics = WorkerMetrics()
        metrics.serve(args.metrics_port, args.metrics_addr)
    async with AsyncClient(args.url, token=args.token, timeout=args.timeout) as client:
        worker = Worker(
            client,
            args.queue,
            handler,
            concurrency=args.concurrency,
            prefetch=args.prefetch,
            wait_seconds=args.wait_seconds,
            visibility_timeout=args.visibility_timeout,
            max_extension=args.max_extension,
            retry_base=args.retry_base,
            retry_cap=args.retry_cap,
            shutdown_grace=args.grace,
            consumer_name=args.consumer_name,
            metrics=metrics,
        )
        await worker.run_until_signalled()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        handler = load_handler(args.handler)
        if args.concurrency < 1 or (args.prefetch is not None and args.prefetch < 1):
            raise ValueError("--concurrency and --prefetch must be at least 1")
        if not 0 <= args.wait_seconds <= 20:
            raise ValueError("--wait-seconds must be 0-20")
    except ValueError as error:
        parser.error(str(error))
    configure(args.log_level, args.log_format)
    try:
        return asyncio.run(serve(args, handler))
    except RetsuError as error:
        print_error(error, as_json=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
