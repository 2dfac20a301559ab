CREATE OR REPLACE FUNCTION pgfleet.jobs_end_notify() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgfleet_job_end', NEW.id::text);
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_end_notify() FROM PUBLIC;
