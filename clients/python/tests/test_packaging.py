"""The client stands alone: httpx and msgspec only, nothing from the server (SPEC §9)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from client_support import CLIENT_SRC

PYPROJECT = CLIENT_SRC.parent / "pyproject.toml"


def test_it_depends_on_httpx_and_msgspec_only() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]

    names = sorted(dep.split(">")[0].split("[")[0] for dep in project["dependencies"])

    assert names == ["httpx", "msgspec"]
    assert project["optional-dependencies"]["metrics"] == ["prometheus-client>=0.20"]
    assert set(project["scripts"]) == {"retsuctl", "retsu-worker"}


def test_importing_it_loads_nothing_from_the_server() -> None:
    code = (
        "import sys, retsu_client, retsu_client.testing, retsu_client.cli.ctl, "
        "retsu_client.cli.worker, retsu_client.logs\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(roots & {'retsu', 'litestar', 'asyncpg', 'sqlalchemy', "
        "'prometheus_client', 'redis'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(CLIENT_SRC)},
        capture_output=True,
        text=True,
        check=True,
    )

    assert done.stdout.strip() == "[]"
