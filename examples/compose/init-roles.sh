#!/bin/sh
# Run once by the postgres image on an empty data directory (docker-entrypoint-initdb.d):
# the owner role that migrations run as, the runtime role pgfleet runs as, and the
# database, owned by the owner. The passwords come from the env file (see .env.example).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
     -v owner_password="$PGFLEET_OWNER_PASSWORD" \
     -v runtime_password="$PGFLEET_RUNTIME_PASSWORD" <<'SQL'
CREATE ROLE pgfleet_owner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'owner_password';
CREATE ROLE pgfleet_runtime LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'runtime_password';
CREATE DATABASE pgfleet OWNER pgfleet_owner;
\connect pgfleet
-- Nobody but the owner creates objects in the database; pgfleet's live in its schema.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON DATABASE pgfleet FROM PUBLIC;
SQL
