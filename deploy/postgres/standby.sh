#!/bin/bash
# The streaming standby of deploy/compose.yaml. First start: a copy of the primary
# (pg_basebackup streams the WAL written meanwhile; --write-recovery-conf makes the copy
# a standby that keeps streaming from it). Then PostgreSQL, in recovery until promoted:
#   docker compose exec postgres-standby pg_ctl promote
# (docs/operations.md, "Losing the database machine").
set -eu
if [ ! -s "${PGDATA}/PG_VERSION" ]; then
  # pg_basebackup empties the directory again when it fails: just try again.
  until pg_basebackup --host=postgres --username="${POSTGRES_USER}" --pgdata="${PGDATA}" \
      --wal-method=stream --write-recovery-conf --checkpoint=fast; do
    echo "standby: the primary is not reachable yet; trying again in 2 s"
    sleep 2
  done
  # The copy carries the primary's synchronous_standby_names. Promoted, it has no
  # standby of its own and must not wait for one (a later line wins).
  echo "synchronous_standby_names = ''" >> "${PGDATA}/postgresql.auto.conf"
  chmod 0700 "${PGDATA}"
fi
exec postgres -c max_connections=100
