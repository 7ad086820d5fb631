"""The client stands alone: httpx and msgspec only, nothing from the server (SPEC §9) —
except its testing helper, which runs the server's own application (extra `testing`)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

from client_support import CLIENT_SRC

PYPROJECT = CLIENT_SRC.parent / "pyproject.toml"
PACKAGE = CLIENT_SRC / "retsu_client"
SERVER_ROOTS = {"retsu", "litestar", "asyncpg", "sqlalchemy", "prometheus_client", "redis"}


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(CLIENT_SRC)},
        capture_output=True,
        text=True,
        check=True,
    )


def test_it_depends_on_httpx_and_msgspec_only() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]

    names = sorted(dep.split(">")[0].split("[")[0] for dep in project["dependencies"])

    assert names == ["httpx", "msgspec"]
    assert project["optional-dependencies"]["metrics"] == ["prometheus-client>=0.20"]
    assert project["optional-dependencies"]["testing"] == ["retsu-server~=0.1.0"]
    assert set(project["scripts"]) == {"retsuctl", "retsu-worker"}


def test_importing_it_loads_nothing_from_the_server() -> None:
    done = _run(
        "import sys, retsu_client, retsu_client.cli.ctl, retsu_client.cli.worker, "
        "retsu_client.logs\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        f"print(sorted(roots & set({sorted(SERVER_ROOTS)!r})))"
    )

    assert done.stdout.strip() == "[]"


def _imported_roots(path: str) -> set[str]:
    tree = ast.parse((PACKAGE / path).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_only_the_testing_helper_imports_the_server() -> None:
    modules = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")]
    importing = sorted(m for m in modules if _imported_roots(m) & {"retsu", "litestar"})

    assert importing and all(m.startswith("testing/") for m in importing), importing


def test_the_testing_helper_without_the_server_says_how_to_install_it() -> None:
    done = _run(
        "import sys\n"
        "class NoServer:  # as if the server were not installed\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'retsu':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoServer)\n"
        "try:\n"
        "    import retsu_client.testing\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )

    assert "pip install 'retsu-client[testing]'" in done.stdout
