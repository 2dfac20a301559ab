-- complete_succeeded and claim_jobs in one call (queries.sql: complete_and_claim): one round
-- trip and one commit per batch. The completion touches running rows, the claim queued ones.
-- fences: each job's fence by id, as complete_succeeded takes them. Any role may call it;
-- it runs as its caller, who needs UPDATE on pgfleet.jobs.
CREATE OR REPLACE FUNCTION pgfleet.succeed_and_claim_jobs(
    ids            bigint[],
    fences         jsonb,
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
                 priority integer, run_at timestamptz, meta text, more boolean,
                 fence bigint)
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
               result = succeed_and_claim_jobs.results -> j.id::text
         WHERE j.id = ANY (succeed_and_claim_jobs.ids)
           AND j.fence = (succeed_and_claim_jobs.fences ->> j.id::text)::bigint
           AND j.state = 'running' AND j.lease_holder = succeed_and_claim_jobs.worker
        RETURNING j.id
    )
    SELECT ARRAY(SELECT f.id FROM finished f) INTO completed;
    done := completed;
    RETURN NEXT;
    RETURN QUERY
    SELECT NULL::bigint[], c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
           c.wait_seconds, c.solo, c.priority, c.run_at, c.meta, c.more, c.fence
      FROM pgfleet.claim_jobs(succeed_and_claim_jobs.queue, succeed_and_claim_jobs.max_jobs,
                              succeed_and_claim_jobs.worker, succeed_and_claim_jobs.lease,
                              succeed_and_claim_jobs.args_limit, succeed_and_claim_jobs.held,
                              succeed_and_claim_jobs.held_solo,
                              succeed_and_claim_jobs.after_priority,
                              succeed_and_claim_jobs.after_run_at,
                              succeed_and_claim_jobs.after_id,
                              succeed_and_claim_jobs.max_bytes) AS c;
END;
$$;
