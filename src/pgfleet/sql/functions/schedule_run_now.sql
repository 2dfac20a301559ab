-- Enqueue a schedule's job now, outside its fire times, paused or not; returns the job's
-- id. The run is recorded in schedule_runs at now(), in the same transaction as the job.
--   SELECT pgfleet.schedule_run_now('nightly-report');
CREATE OR REPLACE FUNCTION pgfleet.schedule_run_now(name text) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d jsonb;
    job bigint;
BEGIN
    SELECT s.definition INTO d FROM pgfleet.schedules s WHERE s.name = schedule_run_now.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgfleet.schedule_run_now: no schedule named %',
            quote_literal(schedule_run_now.name) USING ERRCODE = 'P0002';
    END IF;
    job := pgfleet.enqueue(d->>'task', coalesce(d->'args', '{}'::jsonb),
                           coalesce(d->>'queue', 'default'),
                           coalesce((d->>'priority')::integer, 0), NULL, NULL, NULL);
    INSERT INTO pgfleet.schedule_runs (schedule, fire_time, job_id)
    VALUES (schedule_run_now.name, now(), job)
    ON CONFLICT (schedule, fire_time) DO UPDATE SET job_id = EXCLUDED.job_id;
    RETURN job;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.schedule_run_now(name text) FROM PUBLIC;
