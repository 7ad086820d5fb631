"""The `retsu` command line: parse, pick a role, load configuration, run it.

Role selection (including the worker name) is checked before configuration is
used or any connection is made, so `retsu worker run queue nope` fails at once.
Exit codes: 0 success, 1 runtime failure (e.g. unreachable database), 2 usage or
configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from retsu import __version__
from retsu.entrypoints.lean import refuse_unused_imports
from retsu.entrypoints.workers import UnknownWorker, check_worker, worker_modules

log = logging.getLogger("retsu")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retsu",
        description="Retsu: an observable, distributed priority queue served over HTTP.",
    )
    parser.add_argument("--version", action="version", version=f"retsu {__version__}")
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="YAML configuration file (required to exist when given; "
        "default: config/retsu.yaml when present)",
    )
    roles = parser.add_subparsers(dest="role", metavar="ROLE")
    roles.required = True
    roles.add_parser("api", help="serve the queue HTTP API, health and metrics")
    roles.add_parser("migrate", help="apply pending database migrations and exit")
    roles.add_parser(
        "dev", help="migrations, API and workers in one process (embedded PostgreSQL by default)"
    )
    worker = roles.add_parser("worker", help="list or run background workers")
    worker_commands = worker.add_subparsers(dest="worker_command", metavar="COMMAND")
    worker_commands.required = True
    listing = worker_commands.add_parser("list", help="list worker modules, or a module's workers")
    listing.add_argument("module", nargs="?")
    run = worker_commands.add_parser("run", help="run one worker with its management server")
    run.add_argument("module")
    run.add_argument("name")
    return parser


def _fail(message: str, code: int) -> int:
    print(f"retsu: {message}", file=sys.stderr)
    return code


def _list_workers(module: str | None) -> int:
    modules = worker_modules()
    if module is None:
        print("\n".join(sorted(modules)))
        return 0
    if module not in modules:
        return _fail(f"unknown worker module {module!r} (known modules: {', '.join(modules)})", 2)
    print("\n".join(modules[module]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    refuse_unused_imports()  # before anything imports the injector (lean.py)
    args = build_parser().parse_args(argv)

    if args.role == "worker":
        if args.worker_command == "list":
            return _list_workers(args.module)
        try:
            check_worker(args.module, args.name)
        except UnknownWorker as error:
            return _fail(str(error), 2)

    # Imported here so `--help` and `--version` stay instant.
    from retsu.adapters.telemetry.logging import configure_logging
    from retsu.entrypoints.settings import ConfigError, load_settings

    try:
        loaded = load_settings(args.config)
    except ConfigError as error:
        return _fail(f"configuration error: {error}", 2)
    settings = loaded.settings
    role = f"worker:{args.name}" if args.role == "worker" else args.role
    configure_logging(
        filter=settings.logging.filter,
        format=settings.logging.format,
        role=role,
        environment=settings.environment,
        version=__version__,
    )
    for warning in loaded.warnings:
        log.warning(warning)

    if args.role != "dev" and settings.database.url is None:
        return _fail("configuration error: database.url is not set (RETSU_DATABASE__URL)", 2)
    if args.role == "api" and settings.http.workers > 1:
        return _run_api_processes(settings)
    # Imported here, not at the top: each spawned API process (http.workers > 1) imports
    # this module first, and this one pulls in SQLAlchemy and Alembic (see api_processes).
    from retsu.entrypoints.database import StartupError

    try:
        from retsu.entrypoints.loop import run

        return run(_run_role(args, settings))
    except StartupError as error:
        return _startup_failure(error)
    except KeyboardInterrupt:
        return 0


def _startup_failure(error: Exception) -> int:
    """Exit 2 for what the configuration alone causes, 1 for the rest (module docstring)."""
    from retsu.entrypoints.database import ConfigurationError

    if isinstance(error, ConfigurationError):
        return _fail(f"configuration error: {error}", 2)
    return _fail(str(error), 1)


def _run_api_processes(settings: object) -> int:
    import os
    import shutil
    import tempfile

    # prometheus-client picks its multiprocess value store at import time, so the
    # directory must be set before anything imports it (the containers do).
    metrics_dir = tempfile.mkdtemp(prefix="retsu-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    from retsu.entrypoints.api_processes import run_api_processes
    from retsu.entrypoints.database import StartupError
    from retsu.entrypoints.settings import Settings

    assert isinstance(settings, Settings)
    try:
        return run_api_processes(settings, settings.http.workers)
    except StartupError as error:
        return _startup_failure(error)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _run_role(args: argparse.Namespace, settings: object) -> int:
    from retsu.entrypoints.settings import Settings

    assert isinstance(settings, Settings)
    if args.role == "api":
        from retsu.entrypoints.api import run_api

        return await run_api(settings)
    if args.role == "migrate":
        from retsu.entrypoints.migrate import run_migrate

        return await run_migrate(settings)
    if args.role == "dev":
        from retsu.entrypoints.dev import run_dev

        return await run_dev(settings)
    from retsu.entrypoints.worker import run_worker

    return await run_worker(settings, args.module, args.name)


if __name__ == "__main__":
    raise SystemExit(main())
