"""Headless Chromium for the console's browser tests: Debian's ``chromium`` and
``chromium-driver``, installed here when missing (as root, with apt-get), driven by Selenium.

Nothing is downloaded outside the distribution's packages: the driver is the one the
``chromium-driver`` package ships, given to Selenium by path (so Selenium Manager, which
would fetch a driver of its own, never runs).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("chromium", "chromium-driver")
_LOCK = Path("/tmp/retsu-chromium-install.lock")
_INSTALL_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class Chromium:
    browser: str
    driver: str


def _found() -> Chromium | None:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    return Chromium(browser, driver) if browser and driver else None


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    """One installer at a time (pytest-xdist workers may all get here at once)."""
    with _LOCK.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["apt-get", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=_INSTALL_TIMEOUT_SECONDS,
        check=False,
    )


def find_or_install_chromium() -> Chromium | str:
    """Chromium and its driver, installing Debian's packages when missing; or the reason
    they cannot be had."""
    found = _found()
    if found is not None:
        return found
    if shutil.which("apt-get") is None:
        return "chromium/chromedriver are missing and there is no apt-get to install them"
    if os.geteuid() != 0:
        return "chromium/chromedriver are missing and only root may apt-get install them"
    with _install_lock():
        found = _found()
        if found is not None:
            return found
        install = _apt("install", "-y", "-q", *PACKAGES)
        if install.returncode != 0:  # a stale package list: refresh it once and retry
            _apt("update", "-q")
            install = _apt("install", "-y", "-q", *PACKAGES)
        found = _found()
        if found is not None:
            return found
        tail = (install.stderr or install.stdout).strip().splitlines()[-3:]
        return "apt-get install chromium chromium-driver failed: " + " | ".join(tail)
