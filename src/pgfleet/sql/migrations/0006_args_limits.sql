-- Limits on args that hold in SQL too.
--
-- * Args are at most 1 MiB of JSON text (measured on args::text, as the worker's claim
--   measures them) and nested at most 64 levels: the same limits as the Python enqueue.
--   A trigger, not a CHECK: a CHECK is tested again by every UPDATE of a row (each claim,
--   each completion), which would make a row written before this migration unclaimable
--   and cost the hot path; the trigger runs only when args are written.

SET LOCAL search_path = pg_catalog, pg_temp;

-- Why args break the limits, or NULL. jsonpath's .**{65} finds any value nested 65 levels
-- down without walking further, so a hostile depth costs no stack.
CREATE FUNCTION pgfleet.args_problem(args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.octet_length(args::text) > 1048576
            THEN 'args are ' || pg_catalog.octet_length(args::text)
                 || ' bytes of JSON text, over the limit of 1048576 bytes'
        WHEN pg_catalog.jsonb_path_exists(args, 'strict $.**{65}'::jsonpath)
            THEN 'args are nested deeper than 64 levels'
    END
$$;

CREATE FUNCTION pgfleet.jobs_args_refused() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'pgfleet: %', pgfleet.args_problem(NEW.args)
        USING ERRCODE = '54000', HINT = 'pgfleet refuses args over 1 MiB or 64 levels deep';
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.jobs_args_refused() FROM PUBLIC;

-- Rows already stored are left alone: the worker refuses them one job at a time.
CREATE TRIGGER jobs_args_limits BEFORE INSERT OR UPDATE OF args ON pgfleet.jobs
    FOR EACH ROW WHEN (pgfleet.args_problem(NEW.args) IS NOT NULL)
    EXECUTE FUNCTION pgfleet.jobs_args_refused();

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
