-- A byte budget for the claim: prefetch auto sizes
-- a claim by the args it measured, so the first claim after a queue turns from tiny jobs to
-- big ones took up to 1,000 of them into one worker. The claim now
-- takes due rows in claim order only while the args of those before stay under max_bytes
-- (the first row always), and says when it left due rows behind for that reason (`more`),
-- so the worker claims again as after a full claim instead of waiting for its next poll.
--
-- * Size of a row's args: what it will take as text in the worker. An uncompressed value
--   is measured by its stored size (no detoast: jsonb's binary form is close to its text);
--   a compressed one only by its text, as its stored size can be a hundredth of it.
-- * Rows locked and left out are released by the claim's own commit.
-- * max_bytes NULL: no budget, the claim as before. The signatures of 0018 stay, as calls
--   of the new ones with no budget: a worker of the previous version keeps working while
--   hosts are replaced (docs/deploying.md).

SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION pgfleet.claim_jobs(
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
) RETURNS TABLE (id bigint, task text, args text, attempt integer, max_attempts integer,
                 args_size integer, wait_seconds float8, solo boolean, priority integer,
                 run_at timestamptz, meta text, more boolean)
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
BEGIN
    -- The walk, the solo rules and the lease are 0018's; `fits` is new.
    RETURN QUERY
    WITH RECURSIVE mine AS MATERIALIZED (
        SELECT count(*) AS jobs, coalesce(bool_or(h.solo), false) AS solo
          FROM pgfleet.jobs h
         WHERE h.lease_holder = claim_jobs.worker AND h.state = 'running'
    ), start (priority, run_at, id) AS (
        SELECT claim_jobs.after_priority, claim_jobs.after_run_at, claim_jobs.after_id + 1
         WHERE claim_jobs.after_id IS NOT NULL
        UNION ALL
        (SELECT f.priority, f.run_at, f.id FROM pgfleet.jobs f
          WHERE f.queue = claim_jobs.queue AND f.state = 'queued'
            AND claim_jobs.after_id IS NULL
          ORDER BY f.priority, f.run_at, f.id LIMIT 1)
    ), prio (priority, run_at, id) AS (
        SELECT s.priority, s.run_at, s.id FROM start s
        UNION ALL
        SELECT n.priority, n.run_at, n.id
          FROM prio p CROSS JOIN LATERAL (
               SELECT f.priority, f.run_at, f.id FROM pgfleet.jobs f
                WHERE f.queue = claim_jobs.queue AND f.state = 'queued'
                  AND f.priority > p.priority
                ORDER BY f.priority, f.run_at, f.id LIMIT 1) n
    ), c AS MATERIALIZED (
        SELECT d.id, d.solo, d.bytes
          FROM prio p CROSS JOIN LATERAL (
               SELECT j.id, j.solo,
                      CASE WHEN claim_jobs.max_bytes IS NULL THEN 0
                           WHEN pg_column_compression(j.args) IS NULL
                           THEN pg_column_size(j.args)
                           ELSE octet_length(j.args::text) END AS bytes
                 FROM pgfleet.jobs j
                WHERE j.queue = claim_jobs.queue AND j.state = 'queued'
                  AND j.priority = p.priority
                  AND (j.run_at, j.id) >= (p.run_at, p.id) AND j.run_at <= now()
                ORDER BY j.run_at, j.id
                LIMIT claim_jobs.max_jobs
                  FOR UPDATE SKIP LOCKED) d
         WHERE NOT EXISTS (SELECT 1 FROM pgfleet.queues q
                            WHERE q.name = claim_jobs.queue AND q.paused)
           AND NOT coalesce(claim_jobs.held_solo, (SELECT m.solo FROM mine m))
         LIMIT claim_jobs.max_jobs
    ), fits AS MATERIALIZED (
        -- Each row with the args of the rows before it. c holds its rows in claim order
        -- (the walk's nested loop over priorities, each an index scan in run_at, id
        -- order; the plan is pinned), so the frame follows c's order and needs no sort.
        -- Were it ever another order, the rows left out would wait for the next claim
        -- from the head, as any row behind the cursor does.
        SELECT w.id, w.solo FROM (
               SELECT c.id, c.solo,
                      sum(c.bytes) OVER (ROWS UNBOUNDED PRECEDING) - c.bytes AS before
                 FROM c) w
         WHERE claim_jobs.max_bytes IS NULL OR w.before < claim_jobs.max_bytes
    ), picked AS MATERIALIZED (
        SELECT f.id FROM fits f
         WHERE NOT EXISTS (SELECT 1 FROM fits s WHERE s.solo)
            OR (f.id = (SELECT s.id FROM fits s WHERE s.solo LIMIT 1)
                AND coalesce(claim_jobs.held, (SELECT m.jobs FROM mine m)) = 0)
    ), leased AS (
        UPDATE pgfleet.jobs j
           SET state = 'running', attempt = least(j.attempt, 999999) + 1,  -- bound: 0022
               lease_holder = claim_jobs.worker,
               lease_expires_at = now() + make_interval(secs => claim_jobs.lease),
               started_at = now()
         WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
        RETURNING j.id, j.task, j.args::text AS args, j.attempt, j.max_attempts,
                  CASE WHEN isfinite(j.run_at)
                       THEN extract(epoch FROM now() - j.run_at)::float8 ELSE 0 END AS waited,
                  j.solo, j.priority,
                  -- The claim cursor's key; a legacy run_at before 1970 ('-infinity', BC)
                  -- is not a Python datetime, and any early time keys the cursor alike.
                  greatest(j.run_at, '1970-01-01 00:00:00+00'::timestamptz) AS run_at,
                  nullif(j.meta, '{}'::jsonb)::text AS meta
    )
    -- Args turned into text once (0018 did it three times a row: 8 ms each for 1 MB).
    SELECT l.id, l.task,
           CASE WHEN octet_length(l.args) <= claim_jobs.args_limit THEN l.args END,
           l.attempt, l.max_attempts, octet_length(l.args), l.waited, l.solo, l.priority,
           l.run_at, l.meta,
           -- Due rows left behind by the budget: the worker claims again soon.
           (SELECT count(*) FROM fits) < (SELECT count(*) FROM c)
      FROM leased l;
END;
$$;

CREATE FUNCTION pgfleet.complete_and_claim_jobs(
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
    -- 0018's fenced completion, then the claim with its budget.
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

-- 0018's signatures: the same claim with no budget (a previous version's workers).
CREATE OR REPLACE FUNCTION pgfleet.claim_jobs(
    queue text, max_jobs integer, worker text, lease float8, args_limit integer, held bigint,
    held_solo boolean, after_priority integer, after_run_at timestamptz, after_id bigint
) RETURNS TABLE (id bigint, task text, args text, attempt integer, max_attempts integer,
                 args_size integer, wait_seconds float8, solo boolean, priority integer,
                 run_at timestamptz, meta text)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size, c.wait_seconds,
           c.solo, c.priority, c.run_at, c.meta
      FROM pgfleet.claim_jobs(queue, max_jobs, worker, lease, args_limit, held, held_solo,
                              after_priority, after_run_at, after_id, NULL::bigint) AS c
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

REVOKE ALL ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer, bigint,
                                          boolean, integer, timestamptz, bigint, bigint)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.complete_and_claim_jobs(
    bigint[], jsonb, jsonb, text, integer, text, float8, integer, bigint, boolean, integer,
    timestamptz, bigint, bigint) FROM PUBLIC;

-- An existing install: the roles that may call 0018's claims may call these.
DO $$
DECLARE
    role text;
BEGIN
    FOR role IN
        SELECT DISTINCT a.grantee::regrole::text
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = 'pgfleet.claim_jobs(text, integer, text, float8, integer, bigint, '
                       'boolean, integer, timestamptz, bigint)'::regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, '
            'integer, bigint, boolean, integer, timestamptz, bigint, bigint) TO %s', role);
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.complete_and_claim_jobs(bigint[], jsonb, '
            'jsonb, text, integer, text, float8, integer, bigint, boolean, integer, '
            'timestamptz, bigint, bigint) TO %s', role);
    END LOOP;
END;
$$;
