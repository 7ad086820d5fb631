"""The console's banner for a held-back xmin horizon (SPEC §10), over the memory twin: a
transaction held open elsewhere, time on the ManualClock."""

from __future__ import annotations

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from tests.unit.http.helpers import Client

BANNER = "data-horizon-warning"


async def test_the_banner_names_the_session_once_the_horizon_is_held_over_5_minutes(
    client: Client, clock: ManualClock, repository: MemoryStorage
) -> None:
    page = await client.get("/console/")
    assert page.status_code == 200
    assert BANNER not in page.text

    held = repository.hold_transaction("<nightly-report>")
    clock.advance(300)
    page = await client.get("/console/")
    assert BANNER not in page.text  # exactly 5 minutes: not yet

    clock.advance(75)
    page = await client.get("/console/")
    assert page.status_code == 200
    assert BANNER in page.text
    banner = page.text.split(BANNER, 1)[1].split("</div>", 1)[0]
    # application_name (escaped), state and age.
    assert "&lt;nightly-report&gt;" in banner
    assert "idle in transaction" in banner
    assert "6 min 15 s" in banner

    held.end()
    page = await client.get("/console/")
    assert BANNER not in page.text


async def test_the_live_refresh_swaps_the_table_only_the_banner_comes_with_the_page(
    client: Client, clock: ManualClock, repository: MemoryStorage
) -> None:
    repository.hold_transaction("psql")
    clock.advance(600)
    fragment = await client.get("/console/fragments/overview")
    assert fragment.status_code == 200
    assert BANNER not in fragment.text
