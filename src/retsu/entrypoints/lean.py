"""What a Retsu process refuses to import: optional integrations of its libraries that it
does not use, and that cost memory in every process whenever they happen to be installed.

dependency-injector imports pydantic-settings and Werkzeug when they are installed, for
its pydantic settings and its Werkzeug proxies: ~4 MB of every Retsu process's RSS
(measured after building the API app: 100.5 → 96.3 MB; the dev and bench extras install
them; SPEC §7b bounds an API process's RSS at 120 MB). pydantic itself stays: the injector
reads its version at import. ``None`` in ``sys.modules`` makes an import raise ImportError,
which those optional imports expect. Called first by each Retsu process (``cli.main``, a
spawned API process), never on import, so a program that imports Retsu's modules keeps its
own.
"""

from __future__ import annotations

import sys

UNUSED_IMPORTS = ("pydantic_settings", "werkzeug", "werkzeug.local")


def refuse_unused_imports() -> None:
    for name in UNUSED_IMPORTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
