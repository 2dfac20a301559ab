-- Flow control across hosts (docs/flow-control.md): a queue's global
-- concurrency, its rate of starts and the concurrency of each concurrency key, enforced by
-- the claim itself, with no leader.
--
-- * queue_limits: what the supervisors published from their config. Its row is also the
--   queue's claim lock: a limited claim locks it FOR UPDATE first, so the limited claims
--   of one queue, on every host, run one after the other; each then counts with a fresh
--   snapshot the jobs the one before it committed.
-- * queue_starts: the ledger of recent starts of rate-limited queues, one row per claim
--   with the number of jobs it started, trimmed to the window by the claims themselves.
-- * Two partial indexes hold only jobs that carry a concurrency key, so the claims and
--   completions of every other job do not maintain them.

SET LOCAL search_path = pg_catalog, pg_temp;

CREATE TABLE pgfleet.queue_limits (
    queue              text PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
    global_concurrency integer CHECK (global_concurrency BETWEEN 1 AND 100000),
    rate_limit         integer CHECK (rate_limit BETWEEN 1 AND 1000000),
    -- The window of rate_limit, in seconds.
    rate_period        float8 CHECK (rate_period > 0 AND rate_period <= 86400),
    -- NULL on a queue without flow control (its workers run the plain claim).
    key_concurrency    integer CHECK (key_concurrency BETWEEN 1 AND 100000),
    published_by       text,
    updated_at         timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK ((rate_limit IS NULL) = (rate_period IS NULL))
);

CREATE TABLE pgfleet.queue_starts (
    queue text NOT NULL,
    at    timestamptz NOT NULL,
    jobs  integer NOT NULL CHECK (jobs > 0)
);

CREATE INDEX queue_starts_idx ON pgfleet.queue_starts (queue, at);

CREATE INDEX jobs_running_key_idx ON pgfleet.jobs (queue, concurrency_key)
    WHERE state = 'running'::pgfleet.job_state AND concurrency_key IS NOT NULL;

CREATE INDEX jobs_queued_key_idx ON pgfleet.jobs (queue, concurrency_key, priority, run_at, id)
    WHERE state = 'queued'::pgfleet.job_state AND concurrency_key IS NOT NULL;

-- The claim of a queue with limits: up to max_jobs due jobs, in claim order, that every
-- limit allows. The fallback limits (the worker's own config) are published only when no
-- supervisor has published the queue's yet; the published ones always win.
--
-- A job with a concurrency key is taken only while fewer than key_concurrency jobs of its
-- key run and it is among the first (key_concurrency - running) due jobs of its key in
-- claim order: first in, first out per key. Blocked rows are passed over, so other keys
-- and unkeyed jobs go on. Paused queues and solo jobs behave as in the plain claim.
CREATE FUNCTION pgfleet.claim_limited(
    queue                       text,
    worker                      text,
    max_jobs                    integer,
    lease                       float8,
    args_limit                  integer,
    fallback_global_concurrency integer,
    fallback_rate_limit         integer,
    fallback_rate_period        float8,
    fallback_key_concurrency    integer
) RETURNS TABLE (id bigint, task text, args text, attempt integer, max_attempts integer,
                 args_size integer, wait_seconds float8)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    q       text := claim_limited.queue;
    lim     pgfleet.queue_limits;
    n       integer := claim_limited.max_jobs;
    used    bigint;
    held    bigint;
    holds_solo boolean;
    started timestamptz;
    k_limit integer;
    running_keys text[];
    key_running  integer[];
    full_keys    text[];
BEGIN
    -- The counts below rely on a fresh snapshot per statement; under a stronger isolation
    -- level they would miss the claims committed while this one waited for the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pgfleet.claim_limited needs READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = '25000';
    END IF;
    SELECT * INTO lim FROM pgfleet.queue_limits l WHERE l.queue = q FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO pgfleet.queue_limits AS l (queue, global_concurrency, rate_limit,
                                               rate_period, key_concurrency, published_by)
        VALUES (q, fallback_global_concurrency, fallback_rate_limit, fallback_rate_period,
                coalesce(fallback_key_concurrency, 1), claim_limited.worker)
        ON CONFLICT DO NOTHING;
        SELECT * INTO lim FROM pgfleet.queue_limits l WHERE l.queue = q FOR UPDATE;
    END IF;
    k_limit := coalesce(lim.key_concurrency, 1);
    -- From here on every statement takes a new snapshot (READ COMMITTED, a volatile
    -- function), so it sees everything the previous holder of the lock committed.
    IF EXISTS (SELECT 1 FROM pgfleet.queues p WHERE p.name = q AND p.paused) THEN
        RETURN;
    END IF;
    SELECT count(*), coalesce(bool_or(j.solo), false) INTO held, holds_solo
      FROM pgfleet.jobs j
     WHERE j.lease_holder = claim_limited.worker AND j.state = 'running'::pgfleet.job_state;
    IF holds_solo THEN
        RETURN;
    END IF;
    IF lim.global_concurrency IS NOT NULL THEN
        SELECT count(*) INTO used FROM pgfleet.jobs j
         WHERE j.queue = q AND j.state = 'running'::pgfleet.job_state;
        n := least(n, lim.global_concurrency - used);
    END IF;
    -- The start time is read after the lock: the starts of one queue are recorded in the
    -- order the claims held it, so the window below holds every earlier start.
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
    -- The running jobs of each key, counted once: the jobs of a key at its limit are then
    -- passed over at the cost of an array test, however many of them wait ahead.
    SELECT coalesce(array_agg(r.k), '{}'), coalesce(array_agg(r.n), '{}'),
           coalesce(array_agg(r.k) FILTER (WHERE r.n >= k_limit), '{}')
      INTO running_keys, key_running, full_keys
      FROM (SELECT j.concurrency_key AS k, count(*)::integer AS n FROM pgfleet.jobs j
             WHERE j.queue = q AND j.state = 'running'::pgfleet.job_state
               AND j.concurrency_key IS NOT NULL
             GROUP BY 1) r;
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT j.id, j.solo, j.priority, j.run_at FROM pgfleet.jobs j
         WHERE j.queue = q AND j.state = 'queued'::pgfleet.job_state AND j.run_at <= now()
           AND (j.concurrency_key IS NULL
                OR (NOT j.concurrency_key = ANY(full_keys)
                    AND coalesce(key_running[array_position(running_keys, j.concurrency_key)],
                                 0)
                 + (SELECT count(*) FROM (
                        SELECT 1 FROM pgfleet.jobs e
                         WHERE e.queue = q AND e.concurrency_key = j.concurrency_key
                           AND e.state = 'queued'::pgfleet.job_state AND e.run_at <= now()
                           AND (e.priority, e.run_at, e.id) < (j.priority, j.run_at, j.id)
                         LIMIT k_limit) ahead)
                 < k_limit))
         ORDER BY j.priority, j.run_at, j.id
         LIMIT n
           FOR UPDATE OF j SKIP LOCKED
    ), first_solo AS (
        SELECT s.id FROM c s WHERE s.solo ORDER BY s.priority, s.run_at, s.id LIMIT 1
    ), u AS (
        UPDATE pgfleet.jobs j
           SET state = 'running'::pgfleet.job_state, attempt = j.attempt + 1,
               lease_holder = claim_limited.worker,
               lease_expires_at = now() + make_interval(secs => claim_limited.lease),
               started_at = started
          FROM c
         WHERE j.id = c.id
           AND (NOT EXISTS (SELECT 1 FROM first_solo)
                OR (c.id = (SELECT f.id FROM first_solo f) AND held = 0))
        RETURNING j.id, j.task,
                  CASE WHEN octet_length(j.args::text) <= claim_limited.args_limit
                       THEN j.args::text END AS args,
                  j.attempt, j.max_attempts, octet_length(j.args::text) AS args_size,
                  -- A row written before 0009 may hold an infinite run_at, which cannot be subtracted.
          CASE WHEN isfinite(j.run_at) THEN extract(epoch FROM now() - j.run_at)::float8
               ELSE 0 END AS wait_seconds
    ), ledger AS (
        INSERT INTO pgfleet.queue_starts (queue, at, jobs)
        SELECT q, started, count(*) FROM u
        HAVING count(*) > 0 AND lim.rate_limit IS NOT NULL
    )
    SELECT u.id, u.task, u.args, u.attempt, u.max_attempts, u.args_size, u.wait_seconds
      FROM u;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.claim_limited(text, text, integer, float8, integer, integer,
                                             integer, float8, integer) FROM PUBLIC;

-- An existing install: the roles that run workers (they may update the jobs table) get
-- what the limited claim needs, as `pgfleet grants` gives a new install.
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
            'GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.queue_limits, '
            'pgfleet.queue_starts TO %s', role);
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.claim_limited(text, text, integer, float8, '
            'integer, integer, integer, float8, integer) TO %s', role);
    END LOOP;
END;
$$;

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
