#!/bin/bash
# Run once, by the postgres image's entrypoint, when it creates the primary's data
# directory (deploy/compose.yaml). Two things make the stack survive losing the primary
# (docs/operations.md, "Losing the database machine"):
#   * the standby may stream from it (a replication line in pg_hba.conf; the role the
#     image creates is a superuser, so it may replicate);
#   * every commit waits until the standby has it (synchronous replication): nothing a
#     client was told is stored is lost when the primary is. With one standby, writes
#     wait while the standby is down; see the runbook.
# It takes effect when the entrypoint restarts the server after initialisation.
echo "host replication ${POSTGRES_USER} all scram-sha-256" >> "${PGDATA}/pg_hba.conf"
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER}" --dbname postgres \
  -c "ALTER SYSTEM SET synchronous_standby_names = '*'"
