"""The worker catalogue: which worker names exist in which module.

Read from the worker container itself (its ``workers`` provider, without building
anything), so the names are listed once, where the workers are wired. Checked before any
configuration is used or connection made, so a typo fails fast.
"""

from __future__ import annotations


def worker_modules() -> dict[str, tuple[str, ...]]:
    """Module name → its workers' names, in the container's order."""
    from retsu.entrypoints.containers import WorkerContainer

    return {"queue": tuple(WorkerContainer.workers.kwargs)}


class UnknownWorker(Exception):
    pass


def check_worker(module: str, name: str) -> None:
    modules = worker_modules()
    if module not in modules:
        known = ", ".join(sorted(modules))
        raise UnknownWorker(f"unknown worker module {module!r} (known modules: {known})")
    if name not in modules[module]:
        known = ", ".join(modules[module])
        raise UnknownWorker(f"unknown worker {name!r} in module {module!r} (known: {known})")
