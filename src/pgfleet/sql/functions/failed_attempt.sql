-- One definition of what a failed attempt does to a job, used by the worker's completion,
-- the give-backs and the rescues.
-- The columns a failed attempt sets: dead when the error is final or the attempts are
-- spent, otherwise queued again `retry_in` seconds from now. `logged_error` is the text
-- kept in the errors history when it differs from last_error (the lease rescue keeps a
-- shorter one there). Called from the UPDATE as
-- SET (state, ...) = (SELECT f.state, ... FROM pgfleet.failed_attempt(...) f).
-- The search_path is pinned, which keeps the planner from inlining the function: an
-- unpinned one resolves jsonb_build_object and the others through its caller's path, where
-- an exact-type function planted in any schema beats pg_catalog's VARIADIC "any" one. The
-- calls name pg_catalog as well, so the body reads the same wherever it is pasted.
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
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN o.dead THEN 'dead'::pgfleet.job_state ELSE 'queued'::pgfleet.job_state END,
           CASE WHEN o.dead THEN $3
                ELSE pg_catalog.now() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => $6)
           END,
           CASE WHEN o.dead THEN pg_catalog.now() END,
           $5,
           $4 OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                     'attempt', $1, 'at', pg_catalog.now(), 'error', coalesce($8, $5)))
      FROM (SELECT coalesce($7, false) OR $1 OPERATOR(pg_catalog.>=) $2 AS dead) o
$$;
