-- One definition of what a failed attempt does to a job, used by the worker's completion,
-- the give-backs and the rescues.
-- The columns a failed attempt sets: dead when the error is final or the attempts are
-- spent, otherwise queued again `retry_in` seconds from now. `logged_error` is the text
-- kept in the errors history when it differs from last_error (the lease rescue keeps a
-- shorter one there). A table function in plain SQL, so the planner inlines it into the
-- UPDATE: SET (state, ...) = (SELECT f.state, ... FROM pgfleet.failed_attempt(...) f).
CREATE OR REPLACE FUNCTION pgfleet.failed_attempt(
    attempt      integer,
    max_attempts integer,
    due_at       timestamptz,
    history      jsonb,
    error        text,
    retry_in     float8 DEFAULT 0,
    final        boolean DEFAULT false,
    logged_error text DEFAULT NULL
) RETURNS TABLE (state pgfleet.job_state, run_at timestamptz, finished_at timestamptz,
                 last_error text, errors jsonb)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN o.dead THEN 'dead'::pgfleet.job_state ELSE 'queued'::pgfleet.job_state END,
           CASE WHEN o.dead THEN $3 ELSE now() + make_interval(secs => $6) END,
           CASE WHEN o.dead THEN now() END,
           $5,
           $4 || jsonb_build_array(jsonb_build_object(
                     'attempt', $1, 'at', now(), 'error', coalesce($8, $5)))
      FROM (SELECT coalesce($7, false) OR $1 >= $2 AS dead) o
$$;
