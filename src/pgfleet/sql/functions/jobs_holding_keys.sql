-- The unfinished jobs holding (task, unique key) pairs, as two parallel arrays: what
-- enqueue_jobs skipped. Running as the owner, it shows a producer only the ids that
-- enqueue_job would have returned for the same keys.
CREATE OR REPLACE FUNCTION pgfleet.jobs_holding_keys(tasks text[], unique_keys text[])
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

REVOKE ALL ON FUNCTION pgfleet.jobs_holding_keys(tasks text[], unique_keys text[]) FROM PUBLIC;
