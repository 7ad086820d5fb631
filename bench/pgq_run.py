"""``pgq run FACTORY --batch-size N`` without its command line.

PgQueuer 1.6.0's ``pgq run`` stops before it starts in this environment (``'str' object
has no attribute 'name'`` in ``setup_fancy_logger``: its Typer option hands over the log
level's name, not the enum), so the consumer scenarios call what the command calls:
``pgqueuer.run`` (the supervisor, SIGTERM/SIGINT handling included) on the command's own
event loop (``asyncio_run``: uvloop when installed).

    python -m bench.pgq_run bench.consumer_handlers:pgqueuer 10
"""

from __future__ import annotations

import sys

from pgqueuer import run
from pgqueuer.adapters.cli.cli import asyncio_run


def main(argv: list[str]) -> int:
    factory, batch_size = argv[0], int(argv[1])
    asyncio_run(run(factory, batch_size=batch_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
