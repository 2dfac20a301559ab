CREATE OR REPLACE FUNCTION pgfleet.jobs_success_clears_error() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.last_error := NULL;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_success_clears_error() FROM PUBLIC;
