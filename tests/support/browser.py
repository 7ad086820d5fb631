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
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

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


_REPLACED = "does not belong to the document"


def _replaced(error: WebDriverException) -> bool:
    """Chromium's way of saying an element's document was swapped for another: what
    Selenium calls stale, under another error."""
    return isinstance(error, StaleElementReferenceException) or _REPLACED in str(error)


def click_and_wait(driver: Any, selector: str, *, timeout: float = 15) -> None:
    """Click the element ``selector`` names and wait until the page it leads to (a form's
    answer, or a link's page) has replaced this one and finished loading.

    Chromium may swap the document between finding an element and clicking it (the last
    navigation still settling); it then refuses the click before dispatching anything, so
    finding and clicking again is safe.
    """
    for attempt in range(3):
        old = driver.find_element(By.TAG_NAME, "html")
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
        except WebDriverException as error:
            if not _replaced(error) or attempt == 2:
                raise
            continue
        break

    def gone(_: Any) -> bool:
        try:
            old.is_enabled()
        except WebDriverException as error:
            if _replaced(error):
                return True
            raise
        return False

    wait = WebDriverWait(driver, timeout)
    wait.until(gone)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
