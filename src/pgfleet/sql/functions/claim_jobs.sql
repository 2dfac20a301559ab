-- The claim, for every queue (queries.sql: claim, complete_and_claim): lock due rows of
-- one queue in claim order, skipping rows another worker holds, and lease them. A paused
-- queue yields none.
-- Flow control: the queue's row of queue_limits, read at each claim, decides. With limits
-- the claim takes that row's lock first, in a statement of its own, so every later
-- statement's fresh snapshot (READ COMMITTED) sees the claims committed before it; it then
-- takes no more than the global concurrency and the rate window leave, and passes over
-- the rows of keys at their limit (docs/flow-control.md).
-- The plan: the SET lines pin one generic plan per session of index scans and nested loops
-- only, the plan a claim of a few hundred rows wants at any table size, neither made anew
-- on each claim nor fitted to the table as it was when first planned. The lease UPDATE
-- finds its rows by `id = ANY(...)`, a primary-key probe per claimed row, not by a join.
-- JIT is off: a disabled path counts 1e10 in the cost, which must never turn JIT on.
-- The walk: one priority at a time, from that priority's head (queue_heads) and only up
-- to now(), so jobs scheduled for later are never read, nor the dead entries that every
-- claimed row leaves at the front of jobs_claim_idx while an old snapshot may still see
-- it. The cost is one index probe per priority with a head, plus the entries of the jobs
-- claimed since maintenance last moved the heads.
-- Solo: a solo job goes only to a worker that holds nothing, alone; a worker holding one
-- claims nothing more. A solo job among the locked rows stops a busy worker's claim, so
-- the worker drains and takes it next.
-- after_*: the claim key (priority, run_at, id) to start past, the last row of the
-- worker's previous full claim (NULL: from the heads): during a drain it is past the
-- entries claimed since the heads last moved. The worker goes back to the heads when a
-- claim comes back short, on a notification and once per poll interval
-- (pgfleet.worker.claim_cursor).
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
                 run_at timestamptz, meta text, more boolean, fence bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- A queue's lock held by a session that stopped talking is waited for this long, then the
-- claim gives up (SQLSTATE 55P03) and the worker tries again at its next claim.
SET lock_timeout = '2s'
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
    q            text := claim_jobs.queue;
    n            integer := claim_jobs.max_jobs;
    lim          pgfleet.queue_limits;
    limited      boolean := false;
    k_limit      integer;
    used         bigint;
    started      timestamptz := now();
    running_keys text[] := '{}';
    key_running  integer[] := '{}';
    full_keys    text[] := '{}';
BEGIN
    -- Nothing starts on a database that has just changed under the fleet (a failover)
    -- while a run it lost may go on (functions/epoch_check.sql).
    IF pgfleet.epoch_check(claim_jobs.lease, false) IS NOT NULL THEN
        RETURN;
    END IF;
    -- Flow control, when the queue has published limits: the claim takes the queue's lock
    -- (its queue_limits row), so the claims of one queue count running jobs and recent
    -- starts one after another, and takes no more than the limits leave.
    SELECT * INTO lim FROM pgfleet.queue_limits l WHERE l.queue = q;
    limited := FOUND AND (lim.global_concurrency IS NOT NULL OR lim.rate_limit IS NOT NULL
                          OR lim.key_concurrency IS NOT NULL);
    IF limited THEN
        -- The counts below need a fresh snapshot per statement.
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'a claim of a queue with flow control needs READ COMMITTED, not %',
                current_setting('transaction_isolation') USING ERRCODE = '25000';
        END IF;
        SELECT * INTO lim FROM pgfleet.queue_limits l WHERE l.queue = q FOR UPDATE;
        k_limit := coalesce(lim.key_concurrency, 1);
        IF lim.global_concurrency IS NOT NULL THEN
            SELECT count(*) INTO used FROM pgfleet.jobs j
             WHERE j.queue = q AND j.state = 'running';
            n := least(n, lim.global_concurrency - used);
        END IF;
        -- Read after the lock: the starts of one queue are recorded in the order the
        -- claims held it, so the window holds every earlier start.
        started := clock_timestamp();
        IF lim.rate_limit IS NOT NULL THEN
            DELETE FROM pgfleet.queue_starts s
             WHERE s.queue = q AND s.at <= started - make_interval(secs => lim.rate_period);
            SELECT coalesce(sum(s.jobs), 0) INTO used FROM pgfleet.queue_starts s
             WHERE s.queue = q AND s.at > started - make_interval(secs => lim.rate_period);
            n := least(n, lim.rate_limit - used);
        END IF;
        IF n <= 0 THEN
            RETURN;
        END IF;
        -- Each key's running jobs, counted once: the rows of a key at its limit are then
        -- passed over at the cost of an array test, however many wait ahead.
        SELECT coalesce(array_agg(r.k), '{}'), coalesce(array_agg(r.n), '{}'),
               coalesce(array_agg(r.k) FILTER (WHERE r.n >= k_limit), '{}')
          INTO running_keys, key_running, full_keys
          FROM (SELECT j.concurrency_key AS k, count(*)::integer AS n FROM pgfleet.jobs j
                 WHERE j.queue = q AND j.state = 'running' AND j.concurrency_key IS NOT NULL
                 GROUP BY 1) r;
    END IF;
    RETURN QUERY
    WITH mine AS MATERIALIZED (
        -- What this worker runs, when it did not say (crash containment).
        SELECT count(*) AS jobs, coalesce(bool_or(h.solo), false) AS solo
          FROM pgfleet.jobs h
         WHERE h.lease_holder = claim_jobs.worker AND h.state = 'running'
    ), prio (priority, run_at, id) AS MATERIALIZED (
        -- Each priority's head (queue_heads), or the worker's cursor where that is past it
        -- in its priority: every waiting row of the priority is at or past its head, so the
        -- walk starts past the dead entries of the jobs claimed before.
        SELECT h.priority,
               CASE WHEN h.priority = claim_jobs.after_priority
                         AND (claim_jobs.after_run_at, claim_jobs.after_id + 1) > (h.run_at, h.id)
                    THEN claim_jobs.after_run_at ELSE h.run_at END,
               CASE WHEN h.priority = claim_jobs.after_priority
                         AND (claim_jobs.after_run_at, claim_jobs.after_id + 1) > (h.run_at, h.id)
                    THEN claim_jobs.after_id + 1 ELSE h.id END
          FROM pgfleet.queue_heads h
         WHERE h.queue = q
           AND (claim_jobs.after_id IS NULL OR h.priority >= claim_jobs.after_priority)
         ORDER BY h.priority
    ), c AS MATERIALIZED (
        SELECT d.id, d.solo, d.bytes
          FROM prio p CROSS JOIN LATERAL (
               SELECT j.id, j.solo,
                      CASE WHEN claim_jobs.max_bytes IS NULL THEN 0
                           WHEN pg_column_compression(j.args) IS NULL
                           THEN pg_column_size(j.args)
                           ELSE octet_length(j.args::text) END AS bytes
                 FROM pgfleet.jobs j
                WHERE j.queue = q AND j.state = 'queued'
                  AND j.priority = p.priority
                  AND (j.run_at, j.id) >= (p.run_at, p.id) AND j.run_at <= now()
                  -- Per-key limits: a row whose key would go over its limit, counting the
                  -- key's running jobs and its rows ahead in this claim, waits.
                  AND (k_limit IS NULL OR j.concurrency_key IS NULL
                       OR (NOT j.concurrency_key = ANY (full_keys)
                           AND coalesce(key_running[array_position(running_keys,
                                                                   j.concurrency_key)], 0)
                               + (SELECT count(*) FROM (
                                      SELECT 1 FROM pgfleet.jobs e
                                       WHERE e.queue = q
                                         AND e.concurrency_key = j.concurrency_key
                                         AND e.state = 'queued' AND e.run_at <= now()
                                         AND (e.priority, e.run_at, e.id)
                                             < (j.priority, j.run_at, j.id)
                                       LIMIT k_limit) ahead)
                               < k_limit))
                ORDER BY j.run_at, j.id
                LIMIT n
                  FOR UPDATE OF j SKIP LOCKED) d
         WHERE NOT EXISTS (SELECT 1 FROM pgfleet.queues z WHERE z.name = q AND z.paused)
           AND NOT coalesce(claim_jobs.held_solo, (SELECT m.solo FROM mine m))
         LIMIT n
    ), fits AS MATERIALIZED (
        -- The byte budget: each row with the args of the rows before it, in c's order,
        -- which is claim order (the plan is pinned), so the frame needs no sort.
        SELECT w.id, w.solo FROM (
               SELECT c.id, c.solo,
                      sum(c.bytes) OVER (ROWS UNBOUNDED PRECEDING) - c.bytes AS before
                 FROM c) w
         WHERE claim_jobs.max_bytes IS NULL OR w.before < claim_jobs.max_bytes
    ), picked AS MATERIALIZED (
        -- A solo job goes alone, and only to a worker running nothing.
        SELECT f.id FROM fits f
         WHERE NOT EXISTS (SELECT 1 FROM fits s WHERE s.solo)
            OR (f.id = (SELECT s.id FROM fits s WHERE s.solo LIMIT 1)
                AND coalesce(claim_jobs.held, (SELECT m.jobs FROM mine m)) = 0)
    ), leased AS (
        -- By id = ANY(...), not a join, so the plan is an index probe per row.
        UPDATE pgfleet.jobs j
           SET state = 'running', attempt = least(j.attempt, 999999) + 1,
               lease_holder = claim_jobs.worker,
               lease_expires_at = now() + make_interval(secs => claim_jobs.lease),
               started_at = started,
               fence = (floor(random() * 2147483648)::bigint << 31)
                       | floor(random() * 2147483648)::bigint
         WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
        RETURNING j.id, j.task, j.args::text AS args, j.attempt, j.max_attempts,
                  CASE WHEN isfinite(j.run_at)
                       THEN extract(epoch FROM now() - j.run_at)::float8 ELSE 0 END AS waited,
                  j.solo, j.priority,
                  -- The claim cursor's key; any run_at before 1970 keys it alike, and
                  -- '-infinity' is no Python datetime.
                  greatest(j.run_at, '1970-01-01 00:00:00+00'::timestamptz) AS run_at,
                  nullif(j.meta, '{}'::jsonb)::text AS meta, j.fence
    )
    -- Args are turned into text once, and sent only within args_limit.
    SELECT l.id, l.task,
           CASE WHEN octet_length(l.args) <= claim_jobs.args_limit THEN l.args END,
           l.attempt, l.max_attempts, octet_length(l.args), l.waited, l.solo, l.priority,
           l.run_at, l.meta,
           -- Due rows left behind by the budget: the worker claims again soon.
           (SELECT count(*) FROM fits) < (SELECT count(*) FROM c), l.fence
      FROM leased l;
    IF limited AND lim.rate_limit IS NOT NULL THEN
        -- A rate-limited queue's starts, read back by the next claims' window.
        GET DIAGNOSTICS used = ROW_COUNT;
        IF used > 0 THEN
            INSERT INTO pgfleet.queue_starts (queue, at, jobs) VALUES (q, started, used);
        END IF;
    END IF;
END;
$$;

-- The previous release's signature, without the byte budget: its workers still call it
-- while a fleet upgrades.
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
