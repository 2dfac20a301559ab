-- The fields tasks and flow control need, and configured defaults on every enqueue path.
--
-- * meta: a small JSON object the enqueuer attaches (tags, a customer id, a trace context);
--   concurrency_key: the key jobs are serialised by; result: a task's return value;
--   progress: what a running task last reported.
-- * task_defaults / queue_defaults: what running supervisors publish from their config and
--   task registries, so an enqueue by name from any language gets the configured queue
--   and attempts. Precedence: the call, then the task, then its queue, then built-in.
-- * One enqueue function for one job (enqueue_job) and one for many (enqueue_jobs), both
--   running as their owner, so a producer role that may only execute them can bulk-enqueue.
-- * Names and meta are checked by triggers, like args in 0006: a CHECK would be tested
--   again by every claim and completion, and direct INSERTs must be refused too.

SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE pgfleet.jobs
    ADD COLUMN meta            jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN concurrency_key text,
    ADD COLUMN result          jsonb,
    ADD COLUMN progress        jsonb;

CREATE TABLE pgfleet.task_defaults (
    task         text PRIMARY KEY,
    queue        text,
    max_attempts integer CHECK (max_attempts BETWEEN 1 AND 1000),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now()
);

CREATE TABLE pgfleet.queue_defaults (
    queue        text PRIMARY KEY,
    max_attempts integer CHECK (max_attempts BETWEEN 1 AND 1000),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Why a job's names break the limits, or NULL. C0 and C1 controls and DEL are refused:
-- names are printed by the CLI and the web UI. The limits are payload.NAME_LIMITS.
CREATE FUNCTION pgfleet.names_problem(task text, queue text, unique_key text,
                                      concurrency_key text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.btrim(task) = '' THEN 'task must not be empty'
        WHEN pg_catalog.btrim(queue) = '' THEN 'queue must not be empty'
        WHEN pg_catalog.length(task) > 255 THEN 'task is over 255 characters'
        WHEN pg_catalog.length(queue) > 128 THEN 'queue is over 128 characters'
        WHEN pg_catalog.length(unique_key) > 255 THEN 'unique_key is over 255 characters'
        WHEN pg_catalog.length(concurrency_key) > 255
            THEN 'concurrency_key is over 255 characters'
        WHEN (task || queue || coalesce(unique_key, '') || coalesce(concurrency_key, ''))
             OPERATOR(pg_catalog.~) '[\x01-\x1f\x7f-\x9f]'
            THEN 'task, queue, unique_key and concurrency_key must not contain control characters'
    END
$$;

-- Why meta breaks the limits, or NULL: an object of at most 64 KiB of JSON text.
CREATE FUNCTION pgfleet.meta_problem(meta jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.jsonb_typeof(meta) <> 'object'
            THEN 'meta must be a JSON object, got ' || pg_catalog.jsonb_typeof(meta)
        WHEN pg_catalog.octet_length(meta::text) > 65536
            THEN 'meta is ' || pg_catalog.octet_length(meta::text)
                 || ' bytes of JSON text, over the limit of 65536 bytes'
        WHEN pg_catalog.jsonb_path_exists(meta, 'strict $.**{17}'::jsonpath)
            THEN 'meta is nested deeper than 16 levels'
    END
$$;

-- Why run_at is refused, or NULL: an infinite time or one outside 1970..3000 (UTC) is a
-- typo, and 'infinity' or year 10000 breaks every reader that subtracts or prints it (the
-- claim's wait time, `pgfleet status`). payload.RUN_AT_EARLIEST and RUN_AT_LATEST.
CREATE FUNCTION pgfleet.run_at_problem(run_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN NOT (run_at >= '1970-01-01 00:00:00+00' AND run_at < '3000-01-01 00:00:00+00')
            THEN 'run_at ' || run_at::text
                 || ' is outside the accepted range 1970-01-01 to 3000-01-01 UTC'
    END
$$;

CREATE FUNCTION pgfleet.jobs_fields_refused() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'pgfleet: %', coalesce(
            pgfleet.names_problem(NEW.task, NEW.queue, NEW.unique_key, NEW.concurrency_key),
            pgfleet.meta_problem(NEW.meta), pgfleet.run_at_problem(NEW.run_at))
        USING ERRCODE = '22023';
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_fields_refused() FROM PUBLIC;

-- The WHEN clauses are written out rather than calling the functions above: they are
-- resolved once, here, under the pinned search_path, and evaluated inline for every row
-- of a bulk enqueue, where a call to a function with its own search_path costs a
-- configuration save and restore per row. The functions name the problem once refused.
CREATE TRIGGER jobs_names_limits
    BEFORE INSERT OR UPDATE OF task, queue, unique_key, concurrency_key ON pgfleet.jobs
    FOR EACH ROW
    WHEN (btrim(NEW.task) = '' OR btrim(NEW.queue) = ''
          OR length(NEW.task) > 255 OR length(NEW.queue) > 128
          OR length(NEW.unique_key) > 255 OR length(NEW.concurrency_key) > 255
          OR (NEW.task || NEW.queue || coalesce(NEW.unique_key, '')
              || coalesce(NEW.concurrency_key, '')) ~ '[\x01-\x1f\x7f-\x9f]')
    EXECUTE FUNCTION pgfleet.jobs_fields_refused();

CREATE TRIGGER jobs_meta_limits BEFORE INSERT OR UPDATE OF meta ON pgfleet.jobs
    FOR EACH ROW
    WHEN (NEW.meta <> '{}'::jsonb
          AND (jsonb_typeof(NEW.meta) <> 'object'
               OR octet_length(NEW.meta::text) > 65536
               OR jsonb_path_exists(NEW.meta, 'strict $.**{17}'::jsonpath)))
    EXECUTE FUNCTION pgfleet.jobs_fields_refused();

CREATE TRIGGER jobs_run_at_limits BEFORE INSERT OR UPDATE OF run_at ON pgfleet.jobs
    FOR EACH ROW
    WHEN (NOT (NEW.run_at >= '1970-01-01 00:00:00+00'::timestamptz
               AND NEW.run_at < '3000-01-01 00:00:00+00'::timestamptz))
    EXECUTE FUNCTION pgfleet.jobs_fields_refused();

-- The same for the args limits of 0006, whose WHEN called args_problem for every row.
DROP TRIGGER jobs_args_limits ON pgfleet.jobs;
CREATE TRIGGER jobs_args_limits BEFORE INSERT OR UPDATE OF args ON pgfleet.jobs
    FOR EACH ROW
    WHEN (octet_length(NEW.args::text) > 1048576
          OR jsonb_path_exists(NEW.args, 'strict $.**{65}'::jsonpath))
    EXECUTE FUNCTION pgfleet.jobs_args_refused();

-- The signatures grow, so the functions are replaced; whoever could execute the old ones
-- (`pgfleet grants`, or grants of the operator's own) may execute the new ones.
CREATE TEMPORARY TABLE pgfleet_enqueue_grantees ON COMMIT DROP AS
SELECT DISTINCT a.grantee::regrole::text AS grantee
  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
 WHERE p.oid IN ('pgfleet.enqueue(text, jsonb, text, integer, timestamptz, integer, text)'
                     ::regprocedure,
                 'pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text)'
                     ::regprocedure)
   AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0;

DROP FUNCTION pgfleet.enqueue(text, jsonb, text, integer, timestamptz, integer, text);
DROP FUNCTION pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text);

-- Enqueue and learn whether this call created the job (created = true) or found an
-- unfinished job of the same task holding the unique key (created = false):
--   SELECT * FROM pgfleet.enqueue_job('send_email', '{"to": "a@b"}', unique_key => 'k1');
-- A NULL queue or max_attempts takes the configured default: the task's published one,
-- then its queue's, then 'default' and 20.
CREATE FUNCTION pgfleet.enqueue_job(
    task            text,
    args            jsonb DEFAULT '{}'::jsonb,
    queue           text DEFAULT NULL,
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT NULL,
    unique_key      text DEFAULT NULL,
    meta            jsonb DEFAULT '{}'::jsonb,
    concurrency_key text DEFAULT NULL,
    OUT job_id      bigint,
    OUT created     boolean
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    task_queue    text;
    task_attempts integer;
    queue_name    text := enqueue_job.queue;
    attempts      integer := enqueue_job.max_attempts;
BEGIN
    IF enqueue_job.args IS NULL OR pg_catalog.jsonb_typeof(enqueue_job.args) <> 'object' THEN
        RAISE EXCEPTION 'pgfleet.enqueue: args must be a JSON object, got %',
            coalesce(pg_catalog.jsonb_typeof(enqueue_job.args), 'null') USING ERRCODE = '22023';
    END IF;
    IF queue_name IS NULL OR attempts IS NULL THEN
        SELECT td.queue, td.max_attempts INTO task_queue, task_attempts
          FROM pgfleet.task_defaults td WHERE td.task = enqueue_job.task;
        queue_name := coalesce(queue_name, task_queue, 'default');
        attempts := coalesce(attempts, task_attempts);
        IF attempts IS NULL THEN
            SELECT qd.max_attempts INTO attempts
              FROM pgfleet.queue_defaults qd WHERE qd.queue = queue_name;
            attempts := coalesce(attempts, 20);
        END IF;
    END IF;
    LOOP
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                       unique_key, meta, concurrency_key)
        VALUES (queue_name, enqueue_job.task, enqueue_job.args, enqueue_job.priority,
                coalesce(enqueue_job.run_at, pg_catalog.now()), attempts,
                enqueue_job.unique_key, coalesce(enqueue_job.meta, '{}'::jsonb),
                enqueue_job.concurrency_key)
        ON CONFLICT (task, unique_key)
           WHERE unique_key IS NOT NULL
             AND state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state)
        DO NOTHING
        RETURNING j.id INTO job_id;
        IF job_id IS NOT NULL THEN
            created := true;
            RETURN;
        END IF;
        SELECT j.id INTO job_id FROM pgfleet.jobs j
         WHERE j.task = enqueue_job.task AND j.unique_key = enqueue_job.unique_key
           AND j.state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state);
        IF job_id IS NOT NULL THEN
            created := false;
            RETURN;
        END IF;
        -- The holder of the key finished between the two statements: insert again.
    END LOOP;
END;
$$;

-- The historical entry point: the job's id only.
CREATE FUNCTION pgfleet.enqueue(
    task            text,
    args            jsonb DEFAULT '{}'::jsonb,
    queue           text DEFAULT NULL,
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT NULL,
    unique_key      text DEFAULT NULL,
    meta            jsonb DEFAULT '{}'::jsonb,
    concurrency_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.job_id FROM pgfleet.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9) AS e
$$;

-- Many jobs in one statement, as parallel arrays (pgfleet.enqueue_many sends them in
-- binary). Rows whose unique key an unfinished job of the same task holds are skipped;
-- the caller looks those up. A NULL run_at means now() plus the row's delay in seconds.
CREATE FUNCTION pgfleet.enqueue_jobs(
    tasks            text[],
    args             text[],
    queues           text[],
    priorities       integer[],
    run_ats          timestamptz[],
    delays           float8[],
    max_attempts     integer[],
    unique_keys      text[],
    metas            text[],
    concurrency_keys text[]
) RETURNS TABLE (id bigint, task text, unique_key text)
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                   unique_key, meta, concurrency_key)
    SELECT q.queue, x.t, x.a::jsonb, x.p,
           coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => x.d)),
           coalesce(x.m, td.max_attempts, qd.max_attempts, 20), x.u,
           coalesce(x.mt::jsonb, '{}'::jsonb), x.ck
      FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
           WITH ORDINALITY AS x(t, a, q, p, r, d, m, u, mt, ck, ord)
      LEFT JOIN pgfleet.task_defaults td ON td.task = x.t
     CROSS JOIN LATERAL (SELECT coalesce(x.q, td.queue, 'default') AS queue) AS q
      LEFT JOIN pgfleet.queue_defaults qd ON qd.queue = q.queue
     ORDER BY x.ord
    ON CONFLICT (task, unique_key)
       WHERE unique_key IS NOT NULL
         AND state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state)
    DO NOTHING
    RETURNING j.id, j.task, j.unique_key
$$;

-- The unfinished jobs holding (task, unique key) pairs, as two parallel arrays: what
-- enqueue_jobs skipped. Running as the owner, it shows a producer only the ids that
-- enqueue_job would have returned for the same keys.
CREATE FUNCTION pgfleet.jobs_holding_keys(tasks text[], unique_keys text[])
RETURNS TABLE (task text, unique_key text, id bigint)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT j.task, j.unique_key, j.id
      FROM pgfleet.jobs j
      JOIN unnest($1, $2) AS k(task, unique_key)
        ON j.task = k.task AND j.unique_key = k.unique_key
     WHERE j.state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state)
$$;

REVOKE ALL ON FUNCTION pgfleet.enqueue(text, jsonb, text, integer, timestamptz, integer, text,
                                       jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
                                           text, jsonb, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.enqueue_jobs(text[], text[], text[], integer[], timestamptz[],
                                            float8[], integer[], text[], text[], text[])
    FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.jobs_holding_keys(text[], text[]) FROM PUBLIC;

DO $$
DECLARE
    role text;
BEGIN
    FOR role IN SELECT grantee FROM pgfleet_enqueue_grantees LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.enqueue(text, jsonb, text, integer, '
            'timestamptz, integer, text, jsonb, text), '
            'pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, '
            'jsonb, text), '
            'pgfleet.enqueue_jobs(text[], text[], text[], integer[], timestamptz[], '
            'float8[], integer[], text[], text[], text[]), '
            'pgfleet.jobs_holding_keys(text[], text[]) TO %s', role);
    END LOOP;
END;
$$;

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
