"""The worker catalogue: which worker names exist in which module.

Checked before any configuration is used or connection made, so a typo fails fast.
"""

from __future__ import annotations

WORKERS: dict[str, tuple[str, ...]] = {
    "queue": (
        "expired-message-cleaner",
        "dead-letter-message-cleaner",
        "state-metrics-collector",
    ),
}


class UnknownWorker(Exception):
    pass


def check_worker(module: str, name: str) -> None:
    if module not in WORKERS:
        known = ", ".join(sorted(WORKERS))
        raise UnknownWorker(f"unknown worker module {module!r} (known modules: {known})")
    if name not in WORKERS[module]:
        known = ", ".join(WORKERS[module])
        raise UnknownWorker(f"unknown worker {name!r} in module {module!r} (known: {known})")
