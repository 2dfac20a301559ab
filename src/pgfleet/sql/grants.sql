-- The least-privilege grants `pgfleet grants` prints or applies, as the owner of the
-- pgfleet schema (the ALTER ROLE behind a pooler needs CREATEROLE or a superuser). {db},
-- {runtime} and {producer} are identifiers filled in by pgfleet.grants. Each block first
-- takes back whatever the role held in the schema, so applying it again converges on this.

-- role: runtime
-- The supervisor, workers and operator commands: data access to pgfleet's tables, no DDL,
-- and only reading the migrations table (a bogus version would make every host unready).
GRANT CONNECT ON DATABASE {db} TO {runtime};
GRANT USAGE ON SCHEMA pgfleet TO {runtime};
REVOKE ALL ON ALL TABLES IN SCHEMA pgfleet FROM {runtime};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgfleet FROM {runtime};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgfleet FROM {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.jobs TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.queues TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.processes TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.schedule_runs TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.schedules TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.schedule_holders TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.task_defaults TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.queue_defaults TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.queue_limits TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.queue_starts TO {runtime};
GRANT SELECT ON pgfleet.migrations TO {runtime};
GRANT SELECT, INSERT, UPDATE ON pgfleet.epoch TO {runtime};
GRANT USAGE ON SEQUENCE pgfleet.job_ids TO {runtime};
GRANT SELECT, INSERT, UPDATE ON pgfleet.queue_heads TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.enqueue(text, jsonb, text, integer, timestamptz, integer, text, jsonb, text) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, jsonb, text) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.enqueue_jobs(text[], text[], text[], integer[], timestamptz[], float8[], integer[], text[], text[], text[]) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.jobs_holding_keys(text[], text[]) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.cancel_jobs(bigint[], text, text) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.job_outcome(bigint, boolean) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.job_result(bigint) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.publish_schedules(text, text, jsonb) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.schedule_add(text, text, text, jsonb, text, text, integer, float8) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.schedule_pause(text, boolean) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.schedule_remove(text) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.schedule_run_now(text) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.claim_limited(text, text, integer, float8, integer, integer, integer, float8, integer) TO {runtime};
-- The claims in both signatures: during an upgrade, workers of the previous version call
-- the ones without max_bytes.
GRANT EXECUTE ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer, bigint, boolean, integer, timestamptz, bigint) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.complete_and_claim_jobs(bigint[], jsonb, jsonb, text, integer, text, float8, integer, bigint, boolean, integer, timestamptz, bigint) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer, bigint, boolean, integer, timestamptz, bigint, bigint) TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.move_heads() TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.find_heads() TO {runtime};
GRANT EXECUTE ON FUNCTION pgfleet.complete_and_claim_jobs(bigint[], jsonb, jsonb, text, integer, text, float8, integer, bigint, boolean, integer, timestamptz, bigint, bigint) TO {runtime};

-- role: runtime-pooler
-- Only with PGFLEET_DATABASE_POOLER=transaction: PgBouncer refuses the startup option that
-- pins each connection's search_path, so the role pins it in this database. Unqualified
-- names in other code logging in as this role then no longer find objects in public.
ALTER ROLE {runtime} IN DATABASE {db} SET search_path = pg_catalog, pgfleet;

-- role: producer
-- Application code that only adds jobs: the enqueue functions run as their owner, so the
-- producer reads and writes no table.
GRANT CONNECT ON DATABASE {db} TO {producer};
GRANT USAGE ON SCHEMA pgfleet TO {producer};
REVOKE ALL ON ALL TABLES IN SCHEMA pgfleet FROM {producer};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgfleet FROM {producer};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgfleet FROM {producer};
GRANT EXECUTE ON FUNCTION pgfleet.enqueue(text, jsonb, text, integer, timestamptz, integer, text, jsonb, text) TO {producer};
GRANT EXECUTE ON FUNCTION pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, jsonb, text) TO {producer};
GRANT EXECUTE ON FUNCTION pgfleet.enqueue_jobs(text[], text[], text[], integer[], timestamptz[], float8[], integer[], text[], text[], text[]) TO {producer};
GRANT EXECUTE ON FUNCTION pgfleet.jobs_holding_keys(text[], text[]) TO {producer};
-- A producer may wait for the jobs it added and read their results.
GRANT EXECUTE ON FUNCTION pgfleet.job_outcome(bigint, boolean) TO {producer};
GRANT EXECUTE ON FUNCTION pgfleet.job_result(bigint) TO {producer};
