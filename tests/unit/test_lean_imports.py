"""A Retsu process refuses the optional imports it never uses (entrypoints/lean.py)."""

from __future__ import annotations

import subprocess
import sys

from retsu.entrypoints.lean import UNUSED_IMPORTS

_PROBE = """
import sys
from retsu.entrypoints.lean import refuse_unused_imports
refuse_unused_imports()
from retsu.entrypoints.containers import ApiContainer
from retsu.entrypoints.settings import build_settings
ApiContainer(settings=build_settings({"database": {"url": "postgresql://u@h/db"}})).app()
loaded = [name for name in NAMES if sys.modules.get(name) is not None]
print(",".join(loaded) or "none")
"""


def test_a_retsu_process_builds_its_app_without_the_unused_imports() -> None:
    probe = f"NAMES = {UNUSED_IMPORTS!r}\n{_PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"


def test_importing_retsu_refuses_nothing_by_itself() -> None:
    probe = "import sys, retsu.entrypoints.cli, retsu.entrypoints.containers; " + (
        f"print(any(sys.modules.get(n, 1) is None for n in {UNUSED_IMPORTS!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
