-- The channel workers LISTEN on (pgfleet.worker.listener.CHANNEL on the Python side).
CREATE OR REPLACE FUNCTION pgfleet.notify_queue(queue text) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.pg_notify('pgfleet_jobs', $1)
$$;
