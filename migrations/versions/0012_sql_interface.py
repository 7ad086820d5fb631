"""The SQL interface (SPEC §3.13): ``retsu.enqueue`` and ``retsu.acknowledge`` inside the
caller's own transaction, and the role ``retsu_producer`` that may call them.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-09

**Same rules as the HTTP routes, not a restatement of the storage.** Both functions check
what the HTTP layer and the use cases check (priority, ttl and delay ranges, the delay
shorter than the lifetime, group, idempotency key, result length), then call the hot path
functions the HTTP path calls (``retsu_enqueue``, ``retsu_acknowledge``: migrations
0005/0009), so counts, history counters, lanes and completed messages come out exactly as
for an HTTP call. An idempotency key is claimed the way the PostgreSQL adapter claims it
(``adapters/postgres/messages.py``) and its fingerprint is computed byte for byte as
``domain.idempotency.fingerprint`` computes it, so a key used over HTTP replays over SQL
and the other way round. Errors raise SQLSTATE ``RT001`` with the API's code first in the
message (``queue_not_found: Queue … does not exist.``).

**Long polls wake at commit.** An API process announces its own enqueues after their
commit, outside the transaction (migration 0004). A SQL caller's transaction is not the
API's, so the functions ``pg_notify`` the same payload (``<queue id>:messages``) on the
same channel inside it: PostgreSQL delivers a notification when its transaction commits,
never for a rollback. The cost measured in migration 0004 (the notify lock serialises
committing notifiers) applies to SQL enqueues only; the HTTP path is unchanged.

**SECURITY DEFINER, and what that opens.** The functions run with the rights of their owner
(the role that ran ``retsu migrate``), so a caller needs no table privilege. What keeps
that from reaching further:

* ``search_path`` is pinned to ``pg_catalog, <Retsu's schema>, pg_temp``: a caller cannot
  put its own schema first, and ``pg_temp`` is named last (unnamed, it would be searched
  *first* for tables, where a caller may create a temporary ``queue`` table). Every name
  in the new code is schema-qualified anyway; the hot path functions they call resolve
  their tables through this pinned path (they have none of their own).
* Nobody else may create objects in either schema: ``retsu`` is new and grants only
  ``USAGE``; Retsu's table schema must not be writable by callers (on PostgreSQL 15+
  ``public`` is not, by default). The migration warns when ``PUBLIC`` may create there,
  because an object created there could shadow a built-in the functions use.
* ``EXECUTE`` is revoked from ``PUBLIC`` on both functions and on every function Retsu
  keeps in its table schema (which ran with the caller's rights anyway, so they reached
  nothing, but a producer has no business calling them); ``retsu_producer`` gets
  ``USAGE`` on ``retsu`` and ``EXECUTE`` on the two functions, nothing else.
* Arguments are values only (no dynamic SQL), each checked as the API checks it, and a
  payload is bounded by the API's request body limit (1 MiB), so a caller cannot store
  more than an HTTP producer could.
* ``retsu_acknowledge`` turns ``synchronous_commit`` off for its own transaction (a lost
  HTTP acknowledgement is a redelivery). In a caller's transaction that would weaken the
  caller's own writes, so ``retsu.acknowledge`` carries ``SET synchronous_commit``: the
  caller's setting is restored when it returns.

``retsu_producer`` is cluster-wide (roles are): the migration of any database creates it
when missing and leaves an existing one as it is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

CHANNEL = "retsu_messages"
ROLE = "retsu_producer"
# Frozen here as every migration freezes its rules; the integration tests hold them to the
# domain's (domain.message, domain.attempts, domain.idempotency, adapters.http).
KEY_RETENTION_SECONDS = 86_400
PAYLOAD_MAX_BYTES = 1_048_576
RESULT_MAX_LENGTH = 65_536
TTL_MAX, DELAY_MAX = 2_592_000, 86_400

_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# A receipt handle that can be one of ours (Retsu hands out canonical UUIDs; PostgreSQL's
# uuid input takes these spellings); anything else is simply not the current delivery.
_HANDLE = "^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"


def _statements(script: str) -> list[str]:
    """One statement each (a prepared statement takes one): split where a line is just
    ``$$;`` or ends a plain statement with ``;``."""
    statements, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        inside = sum(part.count("$$") for part in current) % 2 == 1
        if line.rstrip().endswith(";") and not inside:
            statements.append("\n".join(current).strip())
            current = []
    if "".join(current).strip():
        statements.append("\n".join(current).strip())
    return statements


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _helpers(s: str) -> list[str]:
    """Functions in Retsu's table schema (``s``, quoted) that the two entry points use."""
    return _statements(f"""
-- A JSON string exactly as Python's json.dumps(…, ensure_ascii=True) writes it: ", \\ and
-- the five short escapes, every other character outside 0x20-0x7E as \\u%04x (lower-case
-- hex, a surrogate pair beyond U+FFFF). Runs of printable ASCII go through whole.
CREATE FUNCTION {s}.retsu_json_string(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT '"' || CASE
    WHEN p_text OPERATOR(pg_catalog.~) '^[ -~]*$' THEN
        pg_catalog.replace(pg_catalog.replace(p_text, '\\', '\\\\'), '"', '\\"')
    ELSE (
        SELECT pg_catalog.string_agg(
            CASE
                WHEN t.c[1] OPERATOR(pg_catalog.~) '^[ -~]' THEN
                    pg_catalog.replace(pg_catalog.replace(t.c[1], '\\', '\\\\'), '"', '\\"')
                WHEN t.c[1] = E'\\n' THEN '\\n'
                WHEN t.c[1] = E'\\r' THEN '\\r'
                WHEN t.c[1] = E'\\t' THEN '\\t'
                WHEN t.c[1] = E'\\b' THEN '\\b'
                WHEN t.c[1] = E'\\f' THEN '\\f'
                WHEN pg_catalog.ascii(t.c[1]) < 65536 THEN
                    '\\u' || pg_catalog.lpad(pg_catalog.to_hex(pg_catalog.ascii(t.c[1])), 4, '0')
                ELSE
                    '\\u' || pg_catalog.to_hex(
                        55296 + ((pg_catalog.ascii(t.c[1]) - 65536) >> 10))
                    || '\\u' || pg_catalog.to_hex(
                        56320 + ((pg_catalog.ascii(t.c[1]) - 65536) & 1023))
            END, '' ORDER BY t.o)
        FROM pg_catalog.regexp_matches(p_text, '[ -~]+|[^ -~]', 'g') WITH ORDINALITY AS t(c, o))
END || '"'
$$;

-- domain.idempotency.fingerprint: SHA-256 of [1, payload, priority, ttl, delay or 0(, group)].
CREATE FUNCTION {s}.retsu_fingerprint(
    p_payload text, p_priority text, p_ttl integer, p_delay integer, p_group text)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.sha256(pg_catalog.convert_to(
    '[1,' || {s}.retsu_json_string(p_payload) || ',' || {s}.retsu_json_string(p_priority)
    || ',' || coalesce(p_ttl::text, 'null') || ',' || coalesce(p_delay, 0)::text
    || CASE WHEN p_group IS NULL THEN '' ELSE ',' || {s}.retsu_json_string(p_group) END
    || ']', 'UTF8'))
$$;

-- A UUIDv7 (RFC 9562) from the database clock: 48 bits of Unix milliseconds, the rest
-- random (a v4's random bits with the version nibble turned from 4 into 7) — except the
-- last five bits, which pick the message's counter row (retsu_shard): here the calling
-- transaction's, the same for every message it enqueues. A transaction that enqueues many
-- messages then holds one counter row per queue and priority, taken in the order it first
-- enqueues to each, instead of rows all over the shards in random order, which deadlocked
-- concurrent transactions of 100 enqueues each at once (measured: bench, enqueue-100).
-- Consecutive transactions still spread over the 32 rows.
CREATE FUNCTION {s}.retsu_uuid7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
SELECT pg_catalog.encode(pg_catalog.set_byte(u, 15,
           (pg_catalog.get_byte(u, 15) & 224)
           | (pg_catalog.txid_current() % 32)::integer), 'hex')::uuid
FROM (SELECT pg_catalog.set_bit(pg_catalog.set_bit(
    overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid())
            PLACING substring(pg_catalog.int8send(pg_catalog.floor(
                extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint) FROM 3)
            FROM 1 FOR 6),
    52, 1), 53, 1) AS u) AS v
$$;

-- An error of the SQL interface: SQLSTATE RT001, the API's code first.
CREATE FUNCTION {s}.retsu_refuse(p_code text, p_detail text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'RT001', MESSAGE = p_code || ': ' || p_detail;
END
$$;

-- The id of a queue named by id (a string shaped like a UUID, as the client decides) or by
-- name; NULL when there is none. A name is looked up; an id is checked by the caller (the
-- hot path function reads the queue's row anyway).
CREATE FUNCTION {s}.retsu_queue_ref(p_queue text) RETURNS uuid
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_queue OPERATOR(pg_catalog.~) '{_UUID}' THEN
        RETURN p_queue::uuid;
    END IF;
    RETURN (SELECT q.id FROM {s}.queue AS q WHERE q.name = p_queue);
END
$$;
""")


def _enqueue(s: str) -> str:
    refuse = f"PERFORM {s}.retsu_refuse"
    return f"""
CREATE FUNCTION retsu.enqueue(
    queue text, payload text, priority text DEFAULT 'MEDIUM', ttl_seconds integer DEFAULT NULL,
    delay_seconds integer DEFAULT NULL, "group" text DEFAULT NULL,
    idempotency_key text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {s}, pg_temp
AS $$
DECLARE
    v_priority smallint;
    v_queue_id uuid;
    v_default_ttl integer;
    v_delay integer := coalesce(enqueue.delay_seconds, 0);
    v_id uuid := {s}.retsu_uuid7();
    v_fingerprint bytea;
    v_found boolean;
    v_bad integer;
    v_known record;
BEGIN
    -- The message, checked in the order of domain.message.NewMessage.parse.
    IF enqueue.payload IS NULL THEN
        {refuse}('invalid_payload', 'payload is required.');
    END IF;
    IF pg_catalog.octet_length(enqueue.payload) > {PAYLOAD_MAX_BYTES} THEN
        {refuse}('payload_too_large',
                 'payload is larger than the limit of {PAYLOAD_MAX_BYTES} bytes (1 MiB).');
    END IF;
    v_priority := CASE enqueue.priority WHEN 'LOW' THEN 1 WHEN 'MEDIUM' THEN 2
                                        WHEN 'HIGH' THEN 3 END;
    IF v_priority IS NULL THEN
        {refuse}('invalid_priority', 'priority must be one of HIGH, MEDIUM, LOW.');
    END IF;
    IF enqueue.ttl_seconds NOT BETWEEN 1 AND {TTL_MAX} THEN
        {refuse}('invalid_ttl', pg_catalog.format(
            'ttl_seconds must be between 1 and {TTL_MAX}, got %s.', enqueue.ttl_seconds));
    END IF;
    IF enqueue.delay_seconds NOT BETWEEN 0 AND {DELAY_MAX} THEN
        {refuse}('invalid_delay', pg_catalog.format(
            'delay_seconds must be between 0 and {DELAY_MAX}, got %s.', enqueue.delay_seconds));
    END IF;
    IF enqueue."group" IS NOT NULL AND enqueue."group" OPERATOR(pg_catalog.!~) '^[!-~]{{1,128}}$'
    THEN
        {refuse}('invalid_group', 'group must be 1 to 128 visible ASCII characters.');
    END IF;
    IF enqueue.idempotency_key IS NOT NULL
       AND enqueue.idempotency_key OPERATOR(pg_catalog.!~) '^[!-~]{{1,128}}$'
    THEN
        {refuse}('invalid_idempotency_key',
                 'idempotency_key must be 1 to 128 visible ASCII characters.');
    END IF;

    v_queue_id := {s}.retsu_queue_ref(enqueue.queue);
    IF enqueue.idempotency_key IS NULL THEN
        -- As POST …/messages: retsu_enqueue reads the queue (its default lifetime, the
        -- delay checked against it) in this transaction.
        SELECT e.queue_found, e.invalid_delay_at INTO v_found, v_bad
        FROM {s}.retsu_enqueue(
            v_queue_id, ARRAY[v_id], ARRAY[enqueue.payload], ARRAY[v_priority],
            ARRAY[enqueue.ttl_seconds], ARRAY[v_delay], ARRAY[enqueue."group"]) AS e;
        IF v_found IS NOT TRUE THEN
            {refuse}('queue_not_found',
                     pg_catalog.format('Queue %s does not exist.', enqueue.queue));
        END IF;
        IF v_bad IS NOT NULL THEN
            SELECT q.default_message_ttl_seconds INTO v_default_ttl
            FROM {s}.queue AS q WHERE q.id = v_queue_id;
            {refuse}('invalid_delay', pg_catalog.format(
                'delay_seconds (%s) must be shorter than the message lifetime (%s s).',
                v_delay, coalesce(enqueue.ttl_seconds, v_default_ttl)));
        END IF;
        PERFORM pg_catalog.pg_notify('{CHANNEL}', v_queue_id::text || '\\:messages');
        RETURN v_id;
    END IF;

    -- As POST …/messages with an Idempotency-Key (MessageService.enqueue_idempotent and
    -- PostgresMessages.enqueue_idempotent): the queue and the delay against its default
    -- lifetime first, then claim the key (a new row, or one past the retention), and store
    -- the message only when claimed. The queue's row is share-locked as the foreign keys
    -- would, so it cannot be deleted under the claim.
    SELECT q.default_message_ttl_seconds INTO v_default_ttl
    FROM {s}.queue AS q WHERE q.id = v_queue_id
    FOR KEY SHARE;
    IF NOT FOUND THEN
        {refuse}('queue_not_found', pg_catalog.format('Queue %s does not exist.', enqueue.queue));
    END IF;
    IF v_delay >= coalesce(enqueue.ttl_seconds, v_default_ttl) THEN
        {refuse}('invalid_delay', pg_catalog.format(
            'delay_seconds (%s) must be shorter than the message lifetime (%s s).',
            v_delay, coalesce(enqueue.ttl_seconds, v_default_ttl)));
    END IF;
    v_fingerprint := {s}.retsu_fingerprint(
        enqueue.payload, enqueue.priority, enqueue.ttl_seconds, enqueue.delay_seconds,
        enqueue."group");
    -- A concurrent claimer of the key waits on its row until this transaction ends, then
    -- finds it taken (a commit) or claims it (a rollback). Each statement below takes a
    -- fresh snapshot (READ COMMITTED), so a winner that committed meanwhile is seen. A key
    -- can vanish between the two (the cleaner): then it is claimed again.
    FOR attempt IN 1..3 LOOP
        INSERT INTO {s}.idempotency_key AS k (queue_id, key, message_id, fingerprint, created_at)
        VALUES (v_queue_id, enqueue.idempotency_key, v_id, v_fingerprint, pg_catalog.now())
        ON CONFLICT (queue_id, key) DO UPDATE
        SET message_id = excluded.message_id, fingerprint = excluded.fingerprint,
            created_at = excluded.created_at
        WHERE k.created_at <= pg_catalog.now()
                              - pg_catalog.make_interval(secs => {KEY_RETENTION_SECONDS})
        RETURNING k.message_id INTO v_known;
        IF FOUND THEN
            SELECT e.queue_found, e.invalid_delay_at INTO v_found, v_bad
            FROM {s}.retsu_enqueue(
                v_queue_id, ARRAY[v_id], ARRAY[enqueue.payload], ARRAY[v_priority],
                ARRAY[coalesce(enqueue.ttl_seconds, v_default_ttl)], ARRAY[v_delay],
                ARRAY[enqueue."group"]) AS e;
            IF v_found IS NOT TRUE OR v_bad IS NOT NULL THEN  -- the row is locked: never
                RAISE EXCEPTION 'the queue changed under an idempotent enqueue';
            END IF;
            PERFORM pg_catalog.pg_notify('{CHANNEL}', v_queue_id::text || '\\:messages');
            RETURN v_id;
        END IF;
        SELECT k.message_id, k.fingerprint INTO v_known
        FROM {s}.idempotency_key AS k
        WHERE k.queue_id = v_queue_id AND k.key = enqueue.idempotency_key;
        IF FOUND THEN
            IF v_known.fingerprint IS DISTINCT FROM v_fingerprint THEN
                {refuse}('idempotency_key_conflict', 'This idempotency_key was already used '
                         'for a different message in this queue.');
            END IF;
            RETURN v_known.message_id;  -- a replay stores, counts and announces nothing
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the idempotency key kept vanishing; try again';
END
$$;
"""


def _acknowledge(s: str) -> str:
    refuse = f"PERFORM {s}.retsu_refuse"
    return f"""
CREATE FUNCTION retsu.acknowledge(
    queue text, message_id uuid, receipt_handle text, result text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {s}, pg_temp
-- retsu_acknowledge relaxes synchronous_commit for its transaction; here that transaction
-- is the caller's, with the caller's own writes: the caller's setting comes back on return.
SET synchronous_commit = on
AS $$
DECLARE
    v_queue_id uuid;
    v_ids uuid[] := '{{}}';
    v_handles uuid[] := '{{}}';
    v_row record;
BEGIN
    IF pg_catalog.char_length(acknowledge.result) > {RESULT_MAX_LENGTH} THEN
        {refuse}('invalid_result', 'result must be at most {RESULT_MAX_LENGTH} characters.');
    END IF;
    v_queue_id := {s}.retsu_queue_ref(acknowledge.queue);
    -- A handle that cannot be one of ours is simply not the current delivery: nothing to
    -- remove, but the queue is still looked for (queue_not_found wins, as over HTTP).
    IF acknowledge.message_id IS NOT NULL
       AND acknowledge.receipt_handle OPERATOR(pg_catalog.~) '{_HANDLE}'
    THEN
        v_ids := ARRAY[acknowledge.message_id];
        v_handles := ARRAY[acknowledge.receipt_handle::uuid];
    END IF;
    SELECT a.queue_found, a.removed, a.wake INTO v_row
    FROM {s}.retsu_acknowledge(v_queue_id, v_ids, v_handles, ARRAY[acknowledge.result]) AS a;
    IF v_row.queue_found IS NOT TRUE THEN
        {refuse}('queue_not_found',
                 pg_catalog.format('Queue %s does not exist.', acknowledge.queue));
    END IF;
    IF v_row.wake THEN  -- a lane's next message, or a free lease under the queue's cap
        PERFORM pg_catalog.pg_notify('{CHANNEL}', v_queue_id::text || '\\:messages');
    END IF;
    RETURN v_row.removed > 0;
END
$$;
"""


def _privileges(s: str, schema: str) -> list[str]:
    enqueue = "retsu.enqueue(text, text, text, integer, integer, text, text)"
    acknowledge = "retsu.acknowledge(text, uuid, text, text)"
    return _statements(f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{ROLE}') THEN
        BEGIN
            CREATE ROLE {ROLE} NOLOGIN;
        EXCEPTION
            -- Roles are cluster-wide: another database's migration made it meanwhile.
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'retsu migrate may not create the role {ROLE}: have an '
                    'administrator run CREATE ROLE {ROLE} NOLOGIN, then migrate again';
        END;
    END IF;
    IF pg_catalog.has_schema_privilege('public', '{schema}', 'CREATE') THEN
        RAISE WARNING 'every role may create objects in schema {schema}, which holds '
            'Retsu''s tables and functions: REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC '
            '(docs/sql.md, Security)';
    END IF;
END
$$;

REVOKE ALL ON SCHEMA retsu FROM PUBLIC;
REVOKE ALL ON FUNCTION {enqueue}, {acknowledge} FROM PUBLIC;
GRANT USAGE ON SCHEMA retsu TO {ROLE};
GRANT EXECUTE ON FUNCTION {enqueue}, {acknowledge} TO {ROLE};

-- Retsu's own functions in its table schema: for Retsu's role only (they run with the
-- caller's rights, so they reached nothing; still, nobody else calls them). A later
-- migration revokes its new functions by name (as 0014 does): the schema-scoped default
-- privileges below cannot take back PostgreSQL's global EXECUTE grant to PUBLIC.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = '{s}'::regnamespace
          AND p.proowner = current_user::regrole
          AND (p.proname LIKE 'retsu\\_%' OR p.proname LIKE 'queue\\_%')
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
ALTER DEFAULT PRIVILEGES IN SCHEMA {s} REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
""")


def upgrade() -> None:
    schema = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    s = _identifier(schema)
    op.execute("CREATE SCHEMA retsu")
    op.execute(
        "COMMENT ON SCHEMA retsu IS 'Retsu''s SQL interface: enqueue and acknowledge "
        "inside your own transaction (docs/sql.md)'"
    )
    for statement in [
        *_helpers(s),
        _enqueue(s),
        _acknowledge(s),
        *_privileges(s, schema.replace("'", "''")),
    ]:
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("Retsu migrations are forward-only")
