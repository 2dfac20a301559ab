-- pgbench: the job lifecycle at the database's own speed, one batch per transaction
-- (pgbench -n -M prepared -f bench/lifecycle.sql -D batch=N). Claim: pgfleet's claim
-- statement from src/pgfleet/sql/queries.sql verbatim (SKIP LOCKED CTE, partial index);
-- finish: the fenced completion of exactly those rows, found by lease holder.
-- Two statements, autocommit each, as a worker does it.
\set holder random(1, 1000000000)
WITH c AS MATERIALIZED (
    SELECT id FROM pgfleet.jobs
     WHERE queue = 'default' AND state = 'queued' AND run_at <= now()
       AND NOT EXISTS (SELECT 1 FROM pgfleet.queues q WHERE q.name = 'default' AND q.paused)
     ORDER BY priority, run_at, id
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
)
UPDATE pgfleet.jobs j
   SET state = 'running', attempt = j.attempt + 1, lease_holder = 'pgbench-' || :holder,
       lease_expires_at = now() + make_interval(secs => 60), started_at = now()
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.task, j.args, j.attempt, j.max_attempts, pg_column_size(j.args),
          extract(epoch FROM now() - j.run_at)::float8;
UPDATE pgfleet.jobs j
   SET state = 'succeeded', finished_at = now(), lease_holder = NULL, lease_expires_at = NULL
 WHERE j.state = 'running' AND j.lease_holder = 'pgbench-' || :holder;
