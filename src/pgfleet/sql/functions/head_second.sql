-- The second key of a head's advisory locks (functions/head_lower.sql): the second a
-- claim key starts in, counted from 2020 (earlier keys count as its first second).
CREATE OR REPLACE FUNCTION pgfleet.head_second(run_at timestamptz) RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT least(greatest(floor(extract(epoch FROM run_at) - 1577836800), 0),
                 2147483647)::integer
$$;

