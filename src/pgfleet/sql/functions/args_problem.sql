-- Args are a JSON object (outside trial T6). pgfleet.enqueue_job refused anything else,
-- but pgfleet.enqueue_jobs and a plain INSERT took '[1]' or '"x"': the job then failed
-- alone at its worker, dead, long after the caller had gone. The args trigger now refuses
-- them on every write of args, with the same message as enqueue_job. A trigger rather than
-- a CHECK: a CHECK is tested again on every UPDATE of the row, so a claim leasing a row
-- stored before this migration would fail; rows already stored are left to their worker,
-- which fails each of them alone.
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
