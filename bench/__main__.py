"""`python -m bench`: run the benchmark, print the table, write docs/performance.md."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.scenarios import SCENARIOS, Config

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
SYSTEMS = ("retsu", "floor", "sql", "minimal", "pgqueuer")


def _csv(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(value: str) -> tuple[str, ...]:
        items = tuple(v.strip() for v in value.split(",") if v.strip())
        unknown = [v for v in items if v not in allowed]
        if unknown or not items:
            raise argparse.ArgumentTypeError(
                f"unknown {unknown or 'empty list'}; choose from {', '.join(allowed)}"
            )
        return items

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Retsu over HTTP vs its raw-SQL floor vs the minimal floor (one-index "
        "table) vs PgQueuer on the same PostgreSQL. "
        "Each system gets a database of its own, created and dropped by the run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and short windows (~1 minute)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        help="seconds per timed scenario or measured window (default 10; --quick 2)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="Retsu API processes (http.workers; default 2)"
    )
    parser.add_argument(
        "--db-connections",
        type=int,
        default=10,
        help="database.max_connections per API process; the floor's and PgQueuer's pools "
        "get workers × this (default 10)",
    )
    parser.add_argument(
        "--connections", type=int, default=32, help="concurrent client connections (default 32)"
    )
    parser.add_argument(
        "--pgq-consumers",
        type=int,
        default=5,
        help="PgQueuer QueueManagers, each on its own connection (default 5, as in "
        "PgQueuer's own benchmark)",
    )
    parser.add_argument(
        "--database-url",
        default=DEFAULT_ADMIN_URL,
        help=f"admin URL where CREATE DATABASE works (default {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument(
        "--redis-url",
        default=DEFAULT_REDIS_URL,
        help="Retsu's shared cache (cache.distributed) when it answers PING; measured to "
        "speed up enqueue (queue details are read per request). 'off' disables it "
        f"(default {DEFAULT_REDIS_URL})",
    )
    parser.add_argument(
        "--pgbouncer",
        metavar="URL",
        help="Retsu's database.url through this running PgBouncer (transaction mode, "
        "forwarding every database to --database-url's server, e.g. "
        "postgresql://postgres@127.0.0.1:6432); database.session_url stays direct "
        "(docs/performance.md, 'Behind PgBouncer')",
    )
    parser.add_argument(
        "--connect-burst",
        action="store_true",
        help="open Retsu's client connections all at once instead of 1 ms apart (shows how "
        "the shared accept socket spreads them over the API processes)",
    )
    parser.add_argument(
        "--systems",
        type=_csv(SYSTEMS),
        default=SYSTEMS,
        help=f"comma-separated subset of {','.join(SYSTEMS)}",
    )
    parser.add_argument(
        "--scenarios",
        type=_csv(SCENARIOS),
        default=SCENARIOS,
        help=f"comma-separated subset of {','.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--mixed-fraction",
        type=float,
        default=0.5,
        help="mixed scenario: producers at this fraction of the enqueue-1 peak (default 0.5)",
    )
    parser.add_argument(
        "--mixed-basis",
        choices=("combined", "enqueue"),
        default="combined",
        help="mixed scenario: the peak the fraction applies to. 'combined' (default): the "
        "rate at which producers and consumers together saturate the system, from "
        "enqueue-1 and dequeue-ack-1; 'enqueue': the enqueue-1 peak alone (with consumers "
        "on top this offers more than the peak)",
    )
    parser.add_argument(
        "--stale-stats",
        action="store_true",
        help="do not ANALYZE each system's queue table after a prefill (by default it is, "
        "so drains and backlogs measure the steady state, not how a system's plans cope "
        "with statistics that still describe an empty table)",
    )
    parser.add_argument(
        "--consumer-rounds",
        type=int,
        help="consumer-1/consumer-10: drains per system, the systems alternating "
        "(default 3; --quick 1)",
    )
    parser.add_argument(
        "--consumer-baseline",
        type=Path,
        metavar="DIR",
        help="consumer-1/consumer-10: also run the retsu-worker of this directory's "
        "retsu_client package (e.g. `git archive <commit> clients/python/src`, extracted), "
        "interleaved with the current one: a before/after in one run",
    )
    parser.add_argument(
        "--consumer-fixed",
        action="store_true",
        help="consumer-1/consumer-10: also run retsu-worker with --prefetch equal to the "
        "concurrency (no fetching ahead: messages held = PgQueuer's batch)",
    )
    parser.add_argument(
        "--pair-order",
        choices=("abba", "baseline-first", "feature-first"),
        default="abba",
        help="groups/max-in-flight/attempts: abba (default) runs baseline, feature, feature, "
        "baseline and pools each side's two runs, which cancels a steady drift of the "
        "machine out of the ratio; baseline-first or feature-first run each side once",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="Markdown file whose generated results section is replaced "
        "(e.g. docs/performance.md); without it the table is only printed",
    )
    parser.add_argument(
        "--note",
        default="",
        help="a line quoted above the results (e.g. 'taken on a busy machine')",
    )
    return parser


def config_from(args: argparse.Namespace) -> Config:
    if args.quick:
        cfg = Config(
            duration=2.0,
            drain_single=2_000,
            drain_batch=10_000,
            backlog_small=1_000,
            backlog_large=100_000,
            warmup_messages=1_000,
            warmup_max_seconds=4.0,
            drain_max_seconds=6.0,
            consumer_single=1_000,
            consumer_batch=3_000,
            consumer_rounds=1,
            consumer_max_seconds=20.0,
            quick=True,
        )
    else:
        cfg = Config()
    if args.duration is not None:
        cfg.duration = args.duration
    cfg.connections = args.connections
    cfg.mixed_fraction = args.mixed_fraction
    cfg.mixed_basis = args.mixed_basis
    cfg.analyze = not args.stale_stats
    cfg.pair_order = args.pair_order
    if args.consumer_rounds is not None:
        cfg.consumer_rounds = max(1, args.consumer_rounds)
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from bench import report, runner
    from bench.retsu_system import redis_reachable

    redis_url = None if args.redis_url == "off" else args.redis_url
    if redis_url is not None and not redis_reachable(redis_url):
        print(f"no Redis at {redis_url}: Retsu runs without its shared cache", file=sys.stderr)
        redis_url = None
    options = runner.Options(
        admin_url=args.database_url,
        workers=args.workers,
        db_connections=args.db_connections,
        pgq_consumers=args.pgq_consumers,
        redis_url=redis_url,
        connect_burst=args.connect_burst,
        pgbouncer_url=args.pgbouncer,
        systems=args.systems,
        scenarios=args.scenarios,
        config=config_from(args),
        consumer_baseline=args.consumer_baseline,
        consumer_fixed=args.consumer_fixed,
    )
    machine = asyncio.run(report.describe_machine(args.database_url))
    outcome = runner.run_sync(options)
    section = report.render(outcome, machine, busy_note=args.note)
    print(section)
    if args.output is not None:
        report.write(args.output, section)
        print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
