-- Pause (paused => true) or resume (false) a schedule on every host, whether it comes
-- from a config file or was added at runtime; a paused schedule enqueues nothing. A pause
-- outlives reloads and restarts; resuming fires from the next fire time on.
--   SELECT pgfleet.schedule_pause('nightly-report', true);
CREATE OR REPLACE FUNCTION pgfleet.schedule_pause(name text, paused boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgfleet.schedules s SET paused = coalesce(schedule_pause.paused, true),
                                   updated_at = now()
     WHERE s.name = schedule_pause.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgfleet.schedule_pause: no schedule named % (a config schedule'
            ' appears once its scheduler has run)', quote_literal(schedule_pause.name)
            USING ERRCODE = 'P0002';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.schedule_pause(name text, paused boolean) FROM PUBLIC;
