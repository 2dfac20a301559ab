-- New waiting rows lower their queue and priority's head (schema.sql, queue_heads): one
-- call of pgfleet.head_lower per queue and priority the statement wrote, at its earliest
-- run_at (id 0: at or before each of its rows; a hash aggregate, where an exact key would
-- sort a bulk insert's rows).
CREATE OR REPLACE FUNCTION pgfleet.jobs_heads_inserted() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT n.queue, n.priority, min(n.run_at) AS run_at FROM new_jobs n
              WHERE n.state = 'queued'::pgfleet.job_state
              GROUP BY n.queue, n.priority
    LOOP
        PERFORM pgfleet.head_lower(r.queue, r.priority, r.run_at, 0);
    END LOOP;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_heads_inserted() FROM PUBLIC;
