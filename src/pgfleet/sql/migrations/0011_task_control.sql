-- Task control: results, cancelling running jobs, snoozes, and waiting for a job's end.
--
-- * cancel_requested_at: when someone asked to cancel the job. A waiting job is cancelled
--   at once; a running one keeps running until its worker (woken by a NOTIFY on
--   pgfleet_cancel naming it, or at its next lease renewal) interrupts it and records it
--   cancelled. Whatever else ends that attempt (a failure, a snooze, a rescue after the
--   worker died, a give-back at shutdown) ends the job cancelled too: a trigger below.
-- * snoozes: how often a task put its job back with pgfleet.Snooze (the worker bounds it).
-- * result_waited: someone waits for this job's end (pgfleet.result); only then does its
--   end send a NOTIFY, so finishing a job nobody waits for costs nothing more.

SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE pgfleet.jobs
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN snoozes             integer NOT NULL DEFAULT 0,
    ADD COLUMN result_waited       boolean NOT NULL DEFAULT false;

-- A cancelled running job ends cancelled, however its attempt ends; a cancelled or dead
-- job queued again by hand (jobs retry) forgets the old request.
CREATE FUNCTION pgfleet.jobs_cancel_requested() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF OLD.state = 'running' AND NEW.state IN ('queued', 'dead') THEN
        NEW.state := 'cancelled';
        NEW.finished_at := now();
    ELSIF NEW.state = 'queued' THEN
        NEW.cancel_requested_at := NULL;
    END IF;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_cancel_requested() FROM PUBLIC;

-- The WHEN clause keeps the trigger off the claim's and completions' path: for a job
-- nobody cancelled it is false and no function is called.
CREATE TRIGGER jobs_cancel_requested BEFORE UPDATE OF state ON pgfleet.jobs
    FOR EACH ROW
    WHEN (OLD.cancel_requested_at IS NOT NULL AND NEW.state <> OLD.state)
    EXECUTE FUNCTION pgfleet.jobs_cancel_requested();

CREATE FUNCTION pgfleet.jobs_end_notify() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgfleet_job_end', NEW.id::text);
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_end_notify() FROM PUBLIC;

-- Only for a job someone waits for: an AFTER trigger whose WHEN is false queues nothing.
CREATE TRIGGER jobs_end_notify AFTER UPDATE OF state ON pgfleet.jobs
    FOR EACH ROW
    WHEN (NEW.result_waited AND NEW.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION pgfleet.jobs_end_notify();

-- Cancel jobs by id, queue or task (at least one; given together they must all match).
-- A waiting job is cancelled now (state 'cancelled' in the result); a running one is
-- marked and its worker told (state 'running' in the result: it ends cancelled within
-- about a second). Finished jobs are left alone and not returned.
--   SELECT * FROM pgfleet.cancel_jobs(ids => ARRAY[42]);
--   SELECT count(*) FROM pgfleet.cancel_jobs(queue => 'emails');
CREATE FUNCTION pgfleet.cancel_jobs(ids bigint[] DEFAULT NULL, queue text DEFAULT NULL,
                                    task text DEFAULT NULL)
RETURNS TABLE (id bigint, state text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF cancel_jobs.ids IS NULL AND cancel_jobs.queue IS NULL AND cancel_jobs.task IS NULL THEN
        RAISE EXCEPTION 'pgfleet.cancel_jobs: give ids, queue or task'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH c AS (
        UPDATE pgfleet.jobs j
           SET state = CASE WHEN j.state = 'queued' THEN 'cancelled'::pgfleet.job_state
                            ELSE j.state END,
               finished_at = CASE WHEN j.state = 'queued' THEN now() ELSE j.finished_at END,
               cancel_requested_at = coalesce(j.cancel_requested_at, now())
         WHERE j.state IN ('queued', 'running')
           AND (cancel_jobs.ids IS NULL OR j.id = ANY(cancel_jobs.ids))
           AND (cancel_jobs.queue IS NULL OR j.queue = cancel_jobs.queue)
           AND (cancel_jobs.task IS NULL OR j.task = cancel_jobs.task)
        RETURNING j.id, j.state, j.lease_holder
    ), told AS (
        SELECT count(pg_notify('pgfleet_cancel', h.lease_holder)) AS n
          FROM (SELECT DISTINCT c.lease_holder FROM c
                 WHERE c.state = 'running' AND c.lease_holder IS NOT NULL) h
    )
    SELECT c.id, c.state::text FROM c CROSS JOIN told ORDER BY c.id;
END;
$$;

-- A job's end as data: (state, result, last_error); no row for an unknown id. With
-- `wait`, an unfinished job is marked so that its end sends a NOTIFY on pgfleet_job_end
-- with its id (pgfleet.result LISTENs there first, then calls this).
CREATE FUNCTION pgfleet.job_outcome(job_id bigint, wait boolean DEFAULT false)
RETURNS TABLE (state text, result jsonb, last_error text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF wait THEN
        UPDATE pgfleet.jobs j SET result_waited = true
         WHERE j.id = job_outcome.job_id AND NOT j.result_waited
           AND j.state IN ('queued', 'running');
    END IF;
    RETURN QUERY SELECT j.state::text, j.result, j.last_error
                   FROM pgfleet.jobs j WHERE j.id = job_outcome.job_id;
END;
$$;

-- The result of a succeeded job; an error for any other (SQLSTATE P0002: no such job;
-- 55000: not finished yet; P0001: dead, with its last error, or cancelled).
--   SELECT pgfleet.job_result(42);
CREATE FUNCTION pgfleet.job_result(job_id bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o record;
BEGIN
    SELECT j.state::text AS state, j.result, j.last_error INTO o
      FROM pgfleet.jobs j WHERE j.id = job_result.job_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgfleet: no job with id %', job_id USING ERRCODE = 'P0002';
    ELSIF o.state = 'succeeded' THEN
        RETURN o.result;
    ELSIF o.state = 'dead' THEN
        RAISE EXCEPTION 'pgfleet: job % is dead: %', job_id,
            split_part(coalesce(o.last_error, 'no error recorded'), E'\n', 1)
            USING ERRCODE = 'P0001';
    ELSIF o.state = 'cancelled' THEN
        RAISE EXCEPTION 'pgfleet: job % was cancelled', job_id USING ERRCODE = 'P0001';
    END IF;
    RAISE EXCEPTION 'pgfleet: job % has not finished (%)', job_id, o.state
        USING ERRCODE = '55000';
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.cancel_jobs(bigint[], text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.job_outcome(bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.job_result(bigint) FROM PUBLIC;

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
