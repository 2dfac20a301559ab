-- A cancelled running job ends cancelled, however its attempt ends; a cancelled or dead
-- job queued again by hand (jobs retry) forgets the old request.
CREATE OR REPLACE FUNCTION pgfleet.jobs_cancel_requested() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF OLD.state = 'running' AND NEW.state IN ('queued', 'dead') THEN
        NEW.state := 'cancelled';
        NEW.finished_at := now();
    ELSIF NEW.state = 'queued' THEN
        NEW.cancel_requested_at := NULL;
    END IF;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_cancel_requested() FROM PUBLIC;
