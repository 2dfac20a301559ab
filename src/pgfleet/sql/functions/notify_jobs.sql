CREATE OR REPLACE FUNCTION pgfleet.notify_jobs() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q    text;
    last text;
BEGIN
    SELECT min(n.queue), max(n.queue) INTO q, last FROM new_jobs n
     WHERE n.state = 'queued'::pgfleet.job_state AND n.run_at <= pg_catalog.now();
    IF q IS NULL THEN
        RETURN NULL;                        -- nothing due
    ELSIF q = last THEN
        PERFORM pg_catalog.pg_notify('pgfleet_jobs', q);
        RETURN NULL;
    END IF;
    FOR q IN SELECT DISTINCT n.queue FROM new_jobs n
              WHERE n.state = 'queued'::pgfleet.job_state AND n.run_at <= pg_catalog.now()
    LOOP
        PERFORM pg_catalog.pg_notify('pgfleet_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.notify_jobs() FROM PUBLIC;
