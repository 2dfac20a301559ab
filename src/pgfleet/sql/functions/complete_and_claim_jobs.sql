-- complete_succeeded and claim_jobs in one call (queries.sql: complete_and_claim): one round
-- trip and one commit per batch. The completion touches running rows, the claim queued ones.
CREATE OR REPLACE FUNCTION pgfleet.complete_and_claim_jobs(
    ids            bigint[],
    attempts       jsonb,
    results        jsonb,
    queue          text,
    max_jobs       integer,
    worker         text,
    lease          float8,
    args_limit     integer,
    held           bigint,
    held_solo      boolean,
    after_priority integer,
    after_run_at   timestamptz,
    after_id       bigint,
    max_bytes      bigint
) RETURNS TABLE (done bigint[], id bigint, task text, args text, attempt integer,
                 max_attempts integer, args_size integer, wait_seconds float8, solo boolean,
                 priority integer, run_at timestamptz, meta text, more boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    completed bigint[];
BEGIN
    -- complete_succeeded's fenced completion, then claim_jobs with its budget.
    WITH finished AS (
        UPDATE pgfleet.jobs j
           SET state = 'succeeded', finished_at = now(), lease_holder = NULL,
               lease_expires_at = NULL,
               result = complete_and_claim_jobs.results -> j.id::text
         WHERE j.id = ANY (complete_and_claim_jobs.ids)
           AND j.attempt = (complete_and_claim_jobs.attempts ->> j.id::text)::int
           AND j.state = 'running' AND j.lease_holder = complete_and_claim_jobs.worker
        RETURNING j.id
    )
    SELECT ARRAY(SELECT f.id FROM finished f) INTO completed;
    done := completed;
    RETURN NEXT;
    RETURN QUERY
    SELECT NULL::bigint[], c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
           c.wait_seconds, c.solo, c.priority, c.run_at, c.meta, c.more
      FROM pgfleet.claim_jobs(complete_and_claim_jobs.queue, complete_and_claim_jobs.max_jobs,
                              complete_and_claim_jobs.worker, complete_and_claim_jobs.lease,
                              complete_and_claim_jobs.args_limit, complete_and_claim_jobs.held,
                              complete_and_claim_jobs.held_solo,
                              complete_and_claim_jobs.after_priority,
                              complete_and_claim_jobs.after_run_at,
                              complete_and_claim_jobs.after_id,
                              complete_and_claim_jobs.max_bytes) AS c;
END;
$$;

-- The signature without max_bytes, for workers of a previous version during an upgrade.
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
