-- Why args break the limits, or NULL. Args are a JSON object of at most 1 MiB of JSON text,
-- nested at most 64 levels. The jobs_args_limits trigger refuses others on every write of
-- args, whoever writes (enqueue_jobs or a plain INSERT too), so the caller learns of it, not
-- the job's worker long after. A trigger rather than a CHECK: a CHECK is tested again on every
-- UPDATE of the row, so a claim leasing a row already stored out of bounds would fail;
-- such rows are left to their worker, which fails each of them alone.
CREATE OR REPLACE FUNCTION pgfleet.args_problem(args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.jsonb_typeof(args) <> 'object'
            THEN 'args must be a JSON object, got ' || pg_catalog.jsonb_typeof(args)
        WHEN pg_catalog.octet_length(args::text) > 1048576
            THEN 'args are ' || pg_catalog.octet_length(args::text)
                 || ' bytes of JSON text, over the limit of 1048576 bytes'
        WHEN pg_catalog.jsonb_path_exists(args, 'strict $.**{65}'::jsonpath)
            THEN 'args are nested deeper than 64 levels'
    END
$$;
