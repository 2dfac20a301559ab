-- Remove a schedule added at runtime; its past runs stay in schedule_runs. A schedule of
-- a config file is refused: it goes when no config names it any more.
--   SELECT pgfleet.schedule_remove('cleanup');
CREATE OR REPLACE FUNCTION pgfleet.schedule_remove(name text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_source text;
BEGIN
    SELECT s.source INTO found_source FROM pgfleet.schedules s
     WHERE s.name = schedule_remove.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgfleet.schedule_remove: no schedule named %',
            quote_literal(schedule_remove.name) USING ERRCODE = 'P0002';
    ELSIF found_source <> 'runtime' THEN
        RAISE EXCEPTION 'pgfleet.schedule_remove: % comes from a config file; remove it'
            ' there (or pause it)', quote_literal(schedule_remove.name)
            USING ERRCODE = '55000';
    END IF;
    DELETE FROM pgfleet.schedules s WHERE s.name = schedule_remove.name;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.schedule_remove(name text) FROM PUBLIC;
