-- What supervisors know and the database did not.
--
-- * processes.failed_queues: on a supervisor's row, the queues it gave up on (crash_limit,
--   start failures) with the reason, as {"queue": "reason"}; written by its maintenance
--   process, so `pgfleet status` on any host shows them. Empty again after a reload.
-- * task_defaults.backoff: a task's own retry policy ({"initial", "max", "factor",
--   "jitter"} in seconds), published with its other defaults, so a crashed attempt is
--   priced by the maintenance process (which imports no task code) like a failed one.
-- * solo (0007) ends with the job: a job that succeeded, died or was cancelled is no
--   longer a suspect, whichever path finished it (a trigger, so none can forget).

SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE pgfleet.processes
    ADD COLUMN failed_queues jsonb NOT NULL DEFAULT '{}'::jsonb;

ALTER TABLE pgfleet.task_defaults ADD COLUMN backoff jsonb;

CREATE FUNCTION pgfleet.jobs_solo_ended() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.solo := false;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_solo_ended() FROM PUBLIC;

-- Fires only for a solo row reaching a final state: the claim and the completions of
-- other rows evaluate the WHEN inline and call nothing.
CREATE TRIGGER jobs_solo_ended BEFORE UPDATE OF state ON pgfleet.jobs
    FOR EACH ROW
    WHEN (NEW.solo AND NEW.state IN ('succeeded'::pgfleet.job_state,
                                     'dead'::pgfleet.job_state,
                                     'cancelled'::pgfleet.job_state))
    EXECUTE FUNCTION pgfleet.jobs_solo_ended();
