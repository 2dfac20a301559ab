-- The previous release's claim of a queue with flow control: its workers still call it
-- while a fleet upgrades. pgfleet.claim_jobs now holds the one claim, limits included.
CREATE OR REPLACE FUNCTION pgfleet.claim_limited(
    queue                       text,
    worker                      text,
    max_jobs                    integer,
    lease                       float8,
    args_limit                  integer,
    fallback_global_concurrency integer,
    fallback_rate_limit         integer,
    fallback_rate_period        float8,
    fallback_key_concurrency    integer
) RETURNS TABLE (id bigint, task text, args text, attempt integer, max_attempts integer,
                 args_size integer, wait_seconds float8)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- The worker's own limits hold until a supervisor publishes the queue's.
    INSERT INTO pgfleet.queue_limits AS l (queue, global_concurrency, rate_limit,
                                           rate_period, key_concurrency, published_by)
    VALUES (claim_limited.queue, fallback_global_concurrency, fallback_rate_limit,
            fallback_rate_period, coalesce(fallback_key_concurrency, 1), claim_limited.worker)
    ON CONFLICT DO NOTHING;
    RETURN QUERY
    SELECT c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size, c.wait_seconds
      FROM pgfleet.claim_jobs(claim_limited.queue, claim_limited.max_jobs,
                              claim_limited.worker, claim_limited.lease,
                              claim_limited.args_limit, NULL::bigint, NULL::boolean,
                              NULL::integer, NULL::timestamptz, NULL::bigint,
                              NULL::bigint) AS c;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.claim_limited(queue text, worker text, max_jobs integer, lease double precision, args_limit integer, fallback_global_concurrency integer, fallback_rate_limit integer, fallback_rate_period double precision, fallback_key_concurrency integer) FROM PUBLIC;
