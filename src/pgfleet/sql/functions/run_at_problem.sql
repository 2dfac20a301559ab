-- Why run_at is refused, or NULL: an infinite time or one outside 1970..3000 (UTC) is a
-- typo, and 'infinity' or year 10000 breaks every reader that subtracts or prints it (the
-- claim's wait time, `pgfleet status`). payload.RUN_AT_EARLIEST and RUN_AT_LATEST.
CREATE OR REPLACE FUNCTION pgfleet.run_at_problem(run_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN NOT (run_at >= '1970-01-01 00:00:00+00' AND run_at < '3000-01-01 00:00:00+00')
            THEN 'run_at ' || run_at::text
                 || ' is outside the accepted range 1970-01-01 to 3000-01-01 UTC'
    END
$$;
