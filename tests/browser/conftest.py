"""The console in a real browser: headless Chromium (Debian's packages) driven by Selenium
against real `retsu` processes.

One browser for the whole session (a fresh profile: cookies are cleared between modules),
one server per module. Without Chromium (and no way to install it) these tests are skipped
with the reason; with RETSU_REQUIRE_SERVICES=1 (CI) that is a failure instead, as for
PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.conftest import create_database, drop_database
from tests.support.browser import find_or_install_chromium
from tests.support.processes import RetsuProcess, free_port, retsu_env
from tests.support.services import PostgresServer, require_services

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console" / "screenshots"
WIDTH = 1280
HEIGHT = 900


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    found = find_or_install_chromium()
    if isinstance(found, str):
        if require_services():
            pytest.fail(f"RETSU_REQUIRE_SERVICES is set but {found}", pytrace=False)
        pytest.skip(found)
    options = webdriver.ChromeOptions()
    options.binary_location = found.browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        "--lang=en-US",
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=found.driver))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class ConsoleServer:
    """A real `retsu api` with its own database."""

    base_url: str
    database_url: str
    process: RetsuProcess
    headers: dict[str, str] = field(default_factory=dict)  # for the JSON API

    def api(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=30)

    def url(self, path: str) -> str:
        return self.base_url + path


@pytest.fixture(scope="session")
async def console_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """One database for the browser tests: each module's server uses queues of its own."""
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


def start_server(
    database_url: str, log_dir: Path, tokens: list[dict[str, Any]] | None = None
) -> ConsoleServer:
    port = free_port()
    settings = {"http__port": str(port)}
    if tokens is not None:
        settings |= {"auth__enabled": "true", "auth__tokens": json.dumps(tokens)}
    process = RetsuProcess(["api"], retsu_env(database_url, **settings), log_dir / "api.log")
    base_url = f"http://127.0.0.1:{port}"
    process.wait_until_ready(base_url + "/health/ready")
    return ConsoleServer(base_url=base_url, database_url=database_url, process=process)


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    """The whole page (not only the window) as docs/console/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(WIDTH, max(HEIGHT, min(height, 3000)))
    try:
        path = SCREENSHOTS / f"{name}.png"
        assert driver.save_screenshot(str(path)), name
        return path
    finally:
        driver.set_window_size(WIDTH, HEIGHT)
