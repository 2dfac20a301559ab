-- The claim and the fused completion + claim as functions with a fixed plan
-- (docs/performance.md "Where the latency goes").
--
-- * Why: the two statements were planned on every execution (plan_cache_mode =
--   force_custom_plan, pgfleet.db), and planning the priority walk over a table with ten
--   partial indexes took longer than running it: a claim of one job cost 1.0-2.0 ms from
--   the client, 0.8 ms of it planning; an empty claim 0.6-1.4 ms.
-- * Why not a plain generic plan: a generic plan is made once per session, for the table
--   as it is then. Made while the table was empty, the lease UPDATE joined the claimed
--   rows by reading every row of jobs through its primary key (25 s for a claim of 100
--   once 900,000 rows were there).
-- * So the plan is pinned instead of estimated: each function keeps one generic plan per
--   session (force_generic_plan) made with every scan an index scan and every join a
--   nested loop, and the lease UPDATE looks its rows up by `id = ANY(...)` rather than by
--   a join. That is the plan a claim of a few hundred rows wants at any table size: index
--   probes in claim order and one primary-key probe per claimed row. JIT is off: a
--   disabled path would count 1e10 in the cost, which must never turn JIT on.
-- * Same rules as the statements of queries.sql they replace (claim, complete_and_claim):
--   the priority walk of 0016, the solo rules of 0007, the fenced completion of 0015.
--   complete_and_claim_jobs completes, then runs claim_jobs: still one round trip and one
--   commit per batch, and the claim's statement exists once.

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
    after_id       bigint
) RETURNS TABLE (id bigint, task text, args text, attempt integer, max_attempts integer,
                 args_size integer, wait_seconds float8, solo boolean, priority integer,
                 run_at timestamptz, meta text)
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
    -- held / held_solo NULL: count the worker's running rows (a scan of every running
    -- row, which the worker avoids by passing what it knows).
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
        SELECT d.id, d.solo
          FROM prio p CROSS JOIN LATERAL (
               SELECT j.id, j.solo FROM pgfleet.jobs j
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
    ), picked AS MATERIALIZED (
        SELECT c.id FROM c
         WHERE NOT EXISTS (SELECT 1 FROM c s WHERE s.solo)
            OR (c.id = (SELECT s.id FROM c s WHERE s.solo LIMIT 1)
                AND coalesce(claim_jobs.held, (SELECT m.jobs FROM mine m)) = 0)
    )
    UPDATE pgfleet.jobs j
       SET state = 'running', attempt = least(j.attempt, 999999) + 1,  -- bound: 0022
           lease_holder = claim_jobs.worker,
           lease_expires_at = now() + make_interval(secs => claim_jobs.lease),
           started_at = now()
     WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
    RETURNING j.id, j.task,
              CASE WHEN octet_length(j.args::text) <= claim_jobs.args_limit
                   THEN j.args::text END,
              j.attempt, j.max_attempts, octet_length(j.args::text),
              CASE WHEN isfinite(j.run_at) THEN extract(epoch FROM now() - j.run_at)::float8
                   ELSE 0 END,
              -- The claim cursor's key; a legacy run_at before 1970 ('-infinity', BC)
              -- is not a Python datetime, and any early time keys the cursor alike.
              j.solo, j.priority, greatest(j.run_at, '1970-01-01 00:00:00+00'::timestamptz),
              nullif(j.meta, '{}'::jsonb)::text;
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
    after_id       bigint
) RETURNS TABLE (done bigint[], id bigint, task text, args text, attempt integer,
                 max_attempts integer, args_size integer, wait_seconds float8, solo boolean,
                 priority integer, run_at timestamptz, meta text)
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
    -- The fenced completion (0015): only rows this worker still holds at that attempt.
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
    -- One row with the ids completed (the rest NULL), then one per job claimed, by the
    -- claim of this worker (its held / held_solo: what it keeps running after the batch).
    done := completed;
    RETURN NEXT;
    RETURN QUERY
    SELECT NULL::bigint[], c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
           c.wait_seconds, c.solo, c.priority, c.run_at, c.meta
      FROM pgfleet.claim_jobs(complete_and_claim_jobs.queue, complete_and_claim_jobs.max_jobs,
                              complete_and_claim_jobs.worker, complete_and_claim_jobs.lease,
                              complete_and_claim_jobs.args_limit, complete_and_claim_jobs.held,
                              complete_and_claim_jobs.held_solo,
                              complete_and_claim_jobs.after_priority,
                              complete_and_claim_jobs.after_run_at,
                              complete_and_claim_jobs.after_id) AS c;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer, bigint,
                                          boolean, integer, timestamptz, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.complete_and_claim_jobs(
    bigint[], jsonb, jsonb, text, integer, text, float8, integer, bigint, boolean, integer,
    timestamptz, bigint) FROM PUBLIC;

-- An existing install: the roles that run workers (they may update the jobs table) may
-- call the claims, as `pgfleet grants` gives a new install.
DO $$
DECLARE
    role text;
BEGIN
    FOR role IN
        SELECT DISTINCT a.grantee::regrole::text
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'pgfleet.jobs'::regclass AND a.privilege_type = 'UPDATE'
           AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, '
            'integer, bigint, boolean, integer, timestamptz, bigint) TO %s', role);
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.complete_and_claim_jobs(bigint[], jsonb, '
            'jsonb, text, integer, text, float8, integer, bigint, boolean, integer, '
            'timestamptz, bigint) TO %s', role);
    END LOOP;
END;
$$;

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
