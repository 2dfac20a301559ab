-- Cancel jobs by id, queue or task (at least one; given together they must all match).
-- A waiting job is cancelled now (state 'cancelled' in the result); a running one is
-- marked and its worker told (state 'running' in the result: it ends cancelled within
-- about a second). Finished jobs are left alone and not returned.
--   SELECT * FROM pgfleet.cancel_jobs(ids => ARRAY[42]);
--   SELECT count(*) FROM pgfleet.cancel_jobs(queue => 'emails');
CREATE OR REPLACE FUNCTION pgfleet.cancel_jobs(ids bigint[] DEFAULT NULL, queue text DEFAULT NULL,
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

REVOKE ALL ON FUNCTION pgfleet.cancel_jobs(ids bigint[], queue text, task text) FROM PUBLIC;
