-- A job's end as data: (state, result, last_error); no row for an unknown id. With
-- `wait`, an unfinished job is marked so that its end sends a NOTIFY on pgfleet_job_end
-- with its id (pgfleet.result LISTENs there first, then calls this).
CREATE OR REPLACE FUNCTION pgfleet.job_outcome(job_id bigint, wait boolean DEFAULT false)
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

REVOKE ALL ON FUNCTION pgfleet.job_outcome(job_id bigint, wait boolean) FROM PUBLIC;
