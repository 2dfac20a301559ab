-- The result of a succeeded job; an error for any other (SQLSTATE P0002: no such job;
-- 55000: not finished yet; P0001: dead, with its last error, or cancelled).
--   SELECT pgfleet.job_result(42);
CREATE OR REPLACE FUNCTION pgfleet.job_result(job_id bigint) RETURNS jsonb
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

REVOKE ALL ON FUNCTION pgfleet.job_result(job_id bigint) FROM PUBLIC;
