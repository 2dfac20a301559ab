CREATE OR REPLACE FUNCTION pgfleet.jobs_solo_ended() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.solo := false;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_solo_ended() FROM PUBLIC;
