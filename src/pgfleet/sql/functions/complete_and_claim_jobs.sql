-- The previous releases' fused completion and claim, fenced by attempt: their workers still
-- call these while a fleet upgrades. Each finds the fences of the rows that attempt still
-- holds, then runs pgfleet.succeed_and_claim_jobs.
CREATE OR REPLACE FUNCTION pgfleet.complete_and_claim_jobs(
    ids bigint[], attempts jsonb, results jsonb, queue text, max_jobs integer, worker text,
    lease float8, args_limit integer, held bigint, held_solo boolean, after_priority integer,
    after_run_at timestamptz, after_id bigint, max_bytes bigint
) RETURNS TABLE (done bigint[], id bigint, task text, args text, attempt integer,
                 max_attempts integer, args_size integer, wait_seconds float8, solo boolean,
                 priority integer, run_at timestamptz, meta text, more boolean)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.done, c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
           c.wait_seconds, c.solo, c.priority, c.run_at, c.meta, c.more
      FROM pgfleet.succeed_and_claim_jobs(
               ids,
               (SELECT coalesce(jsonb_object_agg(j.id::text, j.fence), '{}'::jsonb)
                  FROM pgfleet.jobs j
                 WHERE j.id = ANY (ids) AND j.state = 'running' AND j.lease_holder = worker
                   AND j.attempt = (attempts ->> j.id::text)::int),
               results, queue, max_jobs, worker, lease, args_limit, held, held_solo,
               after_priority, after_run_at, after_id, max_bytes) AS c
$$;

CREATE OR REPLACE FUNCTION pgfleet.complete_and_claim_jobs(
    ids bigint[], attempts jsonb, results jsonb, queue text, max_jobs integer, worker text,
    lease float8, args_limit integer, held bigint, held_solo boolean, after_priority integer,
    after_run_at timestamptz, after_id bigint
) RETURNS TABLE (done bigint[], id bigint, task text, args text, attempt integer,
                 max_attempts integer, args_size integer, wait_seconds float8, solo boolean,
                 priority integer, run_at timestamptz, meta text)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.done, c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
           c.wait_seconds, c.solo, c.priority, c.run_at, c.meta
      FROM pgfleet.complete_and_claim_jobs(ids, attempts, results, queue, max_jobs, worker,
                                           lease, args_limit, held, held_solo, after_priority,
                                           after_run_at, after_id, NULL::bigint) AS c
$$;

REVOKE ALL ON FUNCTION pgfleet.complete_and_claim_jobs(ids bigint[], attempts jsonb, results jsonb, queue text, max_jobs integer, worker text, lease double precision, args_limit integer, held bigint, held_solo boolean, after_priority integer, after_run_at timestamp with time zone, after_id bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.complete_and_claim_jobs(ids bigint[], attempts jsonb, results jsonb, queue text, max_jobs integer, worker text, lease double precision, args_limit integer, held bigint, held_solo boolean, after_priority integer, after_run_at timestamp with time zone, after_id bigint, max_bytes bigint) FROM PUBLIC;
