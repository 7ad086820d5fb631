"""A queue's ``max_in_flight`` costs nothing while it is far away: claims take the queue's
advisory lock in shared mode then, and an acknowledgement wakes the waiting polls only
near the cap (SPEC §3.10, §7b: "a never-reached ``max_in_flight`` ≥ 0.9 ×").

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

**Before.** Every claim of a capped queue took ``pg_advisory_xact_lock`` on the queue in
exclusive mode and held it until it committed, so claims ran one at a time however far the
cap was: measured on the SQL floor, 14.0 of a capped claim's 16.1 ms were waiting for that
lock (docs/performance.md, "New features' costs"), and every acknowledgement of a capped
queue answered ``wake``, so each API process sent a NOTIFY every few milliseconds.

**Now.** ``M`` = ``max_connections`` × 100 (``retsu_cap_margin``) bounds the new leases that
all claims running at once can take: at most one claim per server connection, each at most
100 (``max_messages``). A claim reads the queue's in-flight sum first, without a lock:

- when the cap is at least ``2M`` away it takes the lock **shared**, reads the sum again and
  takes at most ``cap − sum − M`` new leases (and at most 100);
- otherwise it takes the lock **exclusive** and at most ``cap − sum``, as before.

Why the cap still holds: take, of any set of claims, the one that read the sum last
(after its lock). Every claim that committed before that read is in its sum. An exclusive
claim cannot commit after that read (it would have needed the lock while this one held it
shared, or it read later). The shared ones that had not committed were running at the
moment of the read, so at most ``N − 1`` others with at most 100 each, ``< M`` — and this
claim took at most ``cap − sum − M``. If the last reader was exclusive, nothing else ran.
The first, unlocked read only chooses the mode, so its age does not matter. A claim in
shared mode whose second read finds the cap nearer than ``M`` takes fewer (at worst none)
and reports ``max_in_flight``: the cap is never passed, at worst briefly under-used, as the
exact path already allowed.

**Waking.** An acknowledgement that frees a lease of a capped queue answers ``wake`` only
when a long poll waits on the queue (a ``queue_waiter`` row, migration 0013: one index
probe) and the queue's in-flight sum was within ``2M`` of the cap, where a claim can have
been held back by it (``retsu_cap_wake``). Before, every such acknowledgement woke, and
each API process sent a NOTIFY every few milliseconds while acknowledgements flowed. A
poll that registers while the acknowledgement runs claims again once its row is committed
(as for ``retsu.enqueue`` in 0013), and any other miss is found at its one-second re-check
(docs/long-polling.md).

**Edited, not restated** (as migration 0013 does): ``retsu_claim_flow`` and
``retsu_acknowledge`` are read back from the catalogue and exact fragments of migration
0009's text replaced; the migration fails if a fragment is not there exactly once.
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

LOCK_KEY = "hashtextextended(p_queue_id::text, 82)"

# PL/pgSQL for the sum: a SQL function with a FROM is planned again at every call (0013).
FUNCTIONS = [
    """
CREATE FUNCTION retsu_cap_margin() RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.current_setting('max_connections')::bigint * 100 $$
""",
    """
CREATE FUNCTION retsu_cap_wake(p_queue_id uuid, p_cap integer) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM queue_waiter AS w WHERE w.queue_id = p_queue_id)
        AND (p_cap <= 2 * retsu_cap_margin()
             OR coalesce((SELECT sum(c.in_flight) FROM queue_state_rollup AS c
                          WHERE c.queue_id = p_queue_id), 0) >= p_cap - 2 * retsu_cap_margin());
END
$$
""",
]

_I = " " * 8  # the claim's indentation at its cap step
OLD_LOCK = (
    f"{_I}-- Claims of a capped queue one at a time: each sees the leases the last one made.\n"
    f"{_I}PERFORM pg_advisory_xact_lock({LOCK_KEY});\n"
)
NEW_LOCK = f"""\
{_I}-- Far from the cap, claims share the queue's lock and each leaves room for every
{_I}-- claim running beside it; near it, one at a time, each seeing the leases the last
{_I}-- one made (migration 0014).
{_I}v_margin := retsu_cap_margin();
{_I}IF v_cap - (SELECT coalesce(sum(c.in_flight), 0) FROM queue_state_rollup AS c
{_I}            WHERE c.queue_id = p_queue_id) >= 2 * v_margin THEN
{_I}    PERFORM pg_advisory_xact_lock_shared({LOCK_KEY});
{_I}    v_shared := true;
{_I}    v_limit := least(v_limit, 100);
{_I}ELSE
{_I}    PERFORM pg_advisory_xact_lock({LOCK_KEY});
{_I}END IF;
"""

# The claim's router: a queue whose only limit is a cap at least 2M away takes the fast
# path (migration 0005's one statement) under the shared lock, with its limit cut to what
# leaves room for every claim beside it; a nearer cap, the general path's exact claim.
_LIVE_LANE = (
    "EXISTS (\n"
    "        SELECT 1 FROM queue_group AS g\n"
    "        WHERE g.queue_id = p_queue_id"
    " AND g.leased + g.pending + g.waiting + g.waiting_delayed > 0)"
)
OLD_ROUTE = f"""    IF v_cap IS NOT NULL OR v_rate IS NOT NULL OR {_LIVE_LANE}
"""
NEW_ROUTE = f"""\
    -- Only a cap, and at least 2M away (migration 0014): the fast path below, under the
    -- queue's lock in shared mode, taking at most what leaves room for every claim beside it.
    IF v_cap IS NOT NULL AND v_rate IS NULL
       AND v_cap - (SELECT coalesce(sum(c.in_flight), 0) FROM queue_state_rollup AS c
                    WHERE c.queue_id = p_queue_id) >= 2 * retsu_cap_margin()
       AND NOT {_LIVE_LANE}
    THEN
        PERFORM pg_advisory_xact_lock_shared({LOCK_KEY});
        SELECT greatest(least(p_limit, 100,
                              v_cap - coalesce(sum(c.in_flight), 0) - retsu_cap_margin()), 0)
        INTO v_allowed
        FROM queue_state_rollup AS c WHERE c.queue_id = p_queue_id;
        v_cut := v_allowed < p_limit;
        p_limit := v_allowed;
        v_cap := NULL;
    END IF;
{OLD_ROUTE}"""
OLD_LOOP_END = "    END LOOP;\n"
NEW_LOOP_END = """\
    END LOOP;
    IF v_cut AND v_claimed >= p_limit THEN
        v_throttled := 'max_in_flight';
    END IF;
"""

# (function, [(migration 0009's fragment, its replacement)]) — each fragment exactly once.
EDITS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "retsu_dequeue(uuid, integer, integer, integer, text, text)",
        [
            (
                "    v_token_at timestamptz := NULL;\n",
                "    v_token_at timestamptz := NULL;\n"
                "    v_allowed integer;\n"
                "    v_cut boolean := false;\n",
            ),
            (OLD_ROUTE, NEW_ROUTE),
            (OLD_LOOP_END, NEW_LOOP_END),
        ],
    ),
    (
        "retsu_claim_flow(uuid, integer, integer, integer, text, text)",
        [
            (
                "    v_new_allowed bigint := 2147483647;\n",
                "    v_new_allowed bigint := 2147483647;\n"
                "    v_margin bigint;\n"
                "    v_shared boolean := false;\n",
            ),
            (OLD_LOCK, NEW_LOCK),
            (
                """                   - (SELECT coalesce(sum(x), 0) FROM unnest(d_in_flight) AS x),
                   0)
""",
                """                   - (SELECT coalesce(sum(x), 0) FROM unnest(d_in_flight) AS x)
                   - CASE WHEN v_shared THEN v_margin ELSE 0 END,
                   0)
""",
            ),
        ],
    ),
    (
        "retsu_acknowledge(uuid, uuid[], uuid[], text[])",
        [
            (
                """        SELECT true, (SELECT count(*) FROM removed), v_cap IS NOT NULL
                                                     AND (SELECT count(*) FROM removed) > 0;
""",
                """        SELECT true, (SELECT count(*) FROM removed), v_cap IS NOT NULL
                                                     AND (SELECT count(*) FROM removed) > 0
                                                     AND retsu_cap_wake(p_queue_id, v_cap);
""",
            ),
            (
                "v_promoted > 0 OR (v_cap IS NOT NULL AND v_removed > 0);",
                "v_promoted > 0 OR (\n        v_cap IS NOT NULL AND v_removed > 0"
                " AND retsu_cap_wake(p_queue_id, v_cap));",
            ),
        ],
    ),
]


def _dollar(text: str, tag: str) -> str:
    if f"${tag}$" in text:
        raise ValueError(f"the text holds the quote ${tag}$")
    return f"${tag}${text}${tag}$"


def upgrade() -> None:
    for statement in FUNCTIONS:
        op.execute(statement)
    # Retsu's own role only (a schema's default privileges cannot take back PostgreSQL's
    # global EXECUTE for PUBLIC, so each function is revoked by name, as 0013 does).
    op.execute(
        "REVOKE ALL ON FUNCTION retsu_cap_margin(), retsu_cap_wake(uuid, integer) FROM PUBLIC"
    )
    for function, edits in EDITS:
        checks = "\n".join(
            f"""    IF (pg_catalog.length(v_definition) - pg_catalog.length(pg_catalog.replace(
            v_definition, {_dollar(old, "o")}, ''))) / pg_catalog.length({_dollar(old, "o")}) <> 1
    THEN
        RAISE EXCEPTION '{function} does not hold migration 0009''s fragment {i} exactly '
            'once: edited by hand?';
    END IF;
    v_definition := pg_catalog.replace(v_definition, {_dollar(old, "o")}, {_dollar(new, "n")});"""
            for i, (old, new) in enumerate(edits, 1)
        )
        op.execute(f"""
DO $do$
DECLARE
    v_definition text := pg_catalog.pg_get_functiondef('{function}'::pg_catalog.regprocedure);
BEGIN
{checks}
    EXECUTE v_definition;
END
$do$
""")


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
