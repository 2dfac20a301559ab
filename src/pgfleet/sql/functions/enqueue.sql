-- The job's id only; pgfleet.enqueue_job also says whether this call created the job.
CREATE OR REPLACE FUNCTION pgfleet.enqueue(
    task            text,
    args            jsonb DEFAULT '{}'::jsonb,
    queue           text DEFAULT NULL,
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT NULL,
    unique_key      text DEFAULT NULL,
    meta            jsonb DEFAULT '{}'::jsonb,
    concurrency_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.job_id FROM pgfleet.enqueue_job($1, $2, $3, $4, $5, $6, $7, $8, $9) AS e
$$;

REVOKE ALL ON FUNCTION pgfleet.enqueue(task text, args jsonb, queue text, priority integer, run_at timestamp with time zone, max_attempts integer, unique_key text, meta jsonb, concurrency_key text) FROM PUBLIC;
