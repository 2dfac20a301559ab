-- Roles that hold and a search_path nobody else controls.
--
-- * Every pgfleet function pins search_path = pg_catalog, pg_temp: an operator or function
--   planted in another schema (an exact-type `=` for pgfleet.job_state in public, say)
--   can no longer be picked by the functions' own comparisons.
-- * The enqueue functions run as their owner (SECURITY DEFINER) and only the roles granted
--   EXECUTE may call them, so a producer needs no right on pgfleet.jobs at all.
-- * A running row always carries a lease, so the rescue can always find it.
-- * Unique keys are scoped per task: one task cannot take another task's key first.

-- This migration's own statements (the index and CHECK expressions below) resolve their
-- operators here, not through the caller's search_path.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION pgfleet.notify_jobs() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT n.queue FROM new_jobs n
              WHERE n.state = 'queued'::pgfleet.job_state AND n.run_at <= pg_catalog.now()
    LOOP
        PERFORM pg_catalog.pg_notify('pgfleet_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.notify_jobs() FROM PUBLIC;

-- A running row without a holder or an expiry is one no rescue ever finds. Rows like that
-- (forged by a role that could write the table) get an expired lease first, so the
-- rescue hands them out again under its usual attempt rules.
UPDATE pgfleet.jobs
   SET lease_holder = coalesce(lease_holder, 'pgfleet-migration-0005'),
       lease_expires_at = coalesce(lease_expires_at, pg_catalog.now())
 WHERE state = 'running'::pgfleet.job_state
   AND (lease_holder IS NULL OR lease_expires_at IS NULL);

ALTER TABLE pgfleet.jobs ADD CONSTRAINT jobs_running_leased
    CHECK (state <> 'running'::pgfleet.job_state
           OR (lease_holder IS NOT NULL AND lease_expires_at IS NOT NULL));

-- A unique key guards only unfinished jobs of the same task.
DROP INDEX pgfleet.jobs_unique_key_idx;
CREATE UNIQUE INDEX jobs_unique_key_idx ON pgfleet.jobs (task, unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state);

-- Enqueue and learn whether this call created the job (created = true) or found an
-- unfinished job of the same task holding the unique key (created = false):
--   SELECT * FROM pgfleet.enqueue_job('send_email', '{"to": "a@b"}', unique_key => 'k1');
CREATE FUNCTION pgfleet.enqueue_job(
    task         text,
    args         jsonb DEFAULT '{}'::jsonb,
    queue        text DEFAULT 'default',
    priority     integer DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 20,
    unique_key   text DEFAULT NULL,
    OUT job_id   bigint,
    OUT created  boolean
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF enqueue_job.args IS NULL OR pg_catalog.jsonb_typeof(enqueue_job.args) <> 'object' THEN
        RAISE EXCEPTION 'pgfleet.enqueue: args must be a JSON object, got %',
            coalesce(pg_catalog.jsonb_typeof(enqueue_job.args), 'null') USING ERRCODE = '22023';
    END IF;
    LOOP
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                       unique_key)
        VALUES (enqueue_job.queue, enqueue_job.task, enqueue_job.args, enqueue_job.priority,
                coalesce(enqueue_job.run_at, pg_catalog.now()), enqueue_job.max_attempts,
                enqueue_job.unique_key)
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

-- The historical entry point keeps its signature and its bigint result.
CREATE OR REPLACE FUNCTION pgfleet.enqueue(
    task         text,
    args         jsonb DEFAULT '{}'::jsonb,
    queue        text DEFAULT 'default',
    priority     integer DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 20,
    unique_key   text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.job_id FROM pgfleet.enqueue_job($1, $2, $3, $4, $5, $6, $7) AS e
$$;

REVOKE ALL ON FUNCTION pgfleet.enqueue(text, jsonb, text, integer, timestamptz, integer, text)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
                                           text) FROM PUBLIC;

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
