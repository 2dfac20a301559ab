-- The claim (queries.sql: claim, complete_and_claim): lock due rows of one queue in claim
-- order, skipping rows another worker holds, and lease them, in one statement. A paused
-- queue yields none.
-- The plan: the SET lines pin one generic plan per session of index scans and nested loops
-- only, the plan a claim of a few hundred rows wants at any table size, neither made anew
-- on each claim nor fitted to the table as it was when first planned. The lease UPDATE
-- finds its rows by `id = ANY(...)`, a primary-key probe per claimed row, not by a join.
-- JIT is off: a disabled path counts 1e10 in the cost, which must never turn JIT on.
-- The walk: due and future rows share jobs_claim_idx (queue, priority, run_at, id), so the
-- claim walks it one priority at a time and reads each priority's rows only up to now():
-- a plain ORDER BY priority, run_at, id LIMIT n scan that finds fewer than n due rows
-- reads every future row of the priority before it can stop. The cost is one index probe
-- per priority visited, plus one when the claim comes short.
-- Solo: a solo job goes only to a worker that holds nothing, alone; a worker holding one
-- claims nothing more. A solo job among the locked rows stops a busy worker's claim, so
-- the worker drains and takes it next.
-- after_*: the claim key (priority, run_at, id) to start past, the last row of the
-- worker's previous full claim (NULL: from the head). Every claimed row leaves a dead
-- entry at the head of jobs_claim_idx that nothing removes during a drain, and a claim
-- from the head steps over all of them. The worker goes back to the head when a claim
-- comes back short, on a notification and once per poll interval (pgfleet.worker.claim_cursor).
-- held / held_solo: what the worker holds (it knows the jobs running in its process, which
-- is what containment is about); NULL counts its running rows instead, a scan of every
-- running row that a worker claiming thousands of times a second should not pay.
-- args_limit: args travel as text, and only within the limit: the worker decodes each
-- job's args in its executor thread, so a hostile row fails that job alone and is never
-- loaded into the worker's memory. meta is NULL when empty (the common case); it carries
-- the trace context of pgfleet.otel for middleware.
-- max_bytes: the args the claim may take, the rows before each row counted (NULL: no
-- budget); `more` says it left due rows behind for it.
CREATE OR REPLACE FUNCTION pgfleet.claim_jobs(
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
    -- The walk, the solo rules, the budget and the lease: see the head of this file.
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
           SET state = 'running', attempt = least(j.attempt, 999999) + 1,  -- jobs_attempt_bound
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
    -- Args become text once, in leased: the cast costs time in proportion to their size.
    SELECT l.id, l.task,
           CASE WHEN octet_length(l.args) <= claim_jobs.args_limit THEN l.args END,
           l.attempt, l.max_attempts, octet_length(l.args), l.waited, l.solo, l.priority,
           l.run_at, l.meta,
           -- Due rows left behind by the budget: the worker claims again soon.
           (SELECT count(*) FROM fits) < (SELECT count(*) FROM c)
      FROM leased l;
END;
$$;

-- The signature without max_bytes: the same claim with no budget, for workers of a previous
-- version during an upgrade.
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

REVOKE ALL ON FUNCTION pgfleet.claim_jobs(queue text, max_jobs integer, worker text, lease double precision, args_limit integer, held bigint, held_solo boolean, after_priority integer, after_run_at timestamp with time zone, after_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION pgfleet.claim_jobs(queue text, max_jobs integer, worker text, lease double precision, args_limit integer, held bigint, held_solo boolean, after_priority integer, after_run_at timestamp with time zone, after_id bigint, max_bytes bigint) FROM PUBLIC;
