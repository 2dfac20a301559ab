-- A row that waits again (a retry, a give-back, a rescue) lowers its head if it is past it.
CREATE OR REPLACE FUNCTION pgfleet.jobs_heads_requeued() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgfleet.head_lower(NEW.queue, NEW.priority, NEW.run_at, NEW.id);
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_heads_requeued() FROM PUBLIC;
