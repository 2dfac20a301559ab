CREATE OR REPLACE FUNCTION pgfleet.jobs_fields_refused() RETURNS trigger
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
