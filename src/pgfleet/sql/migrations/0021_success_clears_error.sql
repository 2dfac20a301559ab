-- A job that succeeds has no current error. last_error is the error that explains where a
-- job is (waiting for a retry, dead, cancelled); a job that crashed once and then succeeded
-- kept `worker died: SIGKILL` there, so `pgfleet jobs show`, `jobs list` and the web UI
-- showed an error on a job that had none. What each attempt ended with stays in `errors`
-- (the per-attempt history), which success never touches.
-- A trigger, like jobs_solo_ended (0010), so no path that finishes a job can forget it
-- (complete_succeeded, complete_and_claim_jobs of 0018): the WHEN is evaluated inline and
-- calls nothing for the common success, a job that never failed.

SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION pgfleet.jobs_success_clears_error() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.last_error := NULL;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_success_clears_error() FROM PUBLIC;

CREATE TRIGGER jobs_success_clears_error BEFORE UPDATE OF state ON pgfleet.jobs
    FOR EACH ROW
    WHEN (NEW.state = 'succeeded'::pgfleet.job_state AND NEW.last_error IS NOT NULL)
    EXECUTE FUNCTION pgfleet.jobs_success_clears_error();
-- Jobs that succeeded before this migration keep theirs until they are pruned: rewriting
-- every finished row (no index serves that search) is not worth a long migration.
