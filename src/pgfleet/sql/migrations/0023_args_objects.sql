-- Args are a JSON object. pgfleet.enqueue_job refused anything else,
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

CREATE OR REPLACE FUNCTION pgfleet.jobs_args_refused() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.jsonb_typeof(NEW.args) <> 'object' THEN
        RAISE EXCEPTION 'pgfleet.enqueue: %', pgfleet.args_problem(NEW.args)
            USING ERRCODE = '22023';
    END IF;
    RAISE EXCEPTION 'pgfleet: %', pgfleet.args_problem(NEW.args)
        USING ERRCODE = '54000', HINT = 'pgfleet refuses args over 1 MiB or 64 levels deep';
END;
$$;

-- Same name, so it keeps its place among the BEFORE triggers (by name).
DROP TRIGGER jobs_args_limits ON pgfleet.jobs;
CREATE TRIGGER jobs_args_limits BEFORE INSERT OR UPDATE OF args ON pgfleet.jobs
    FOR EACH ROW
    WHEN (jsonb_typeof(NEW.args) <> 'object'
          OR octet_length(NEW.args::text) > 1048576
          OR ((pg_column_size(NEW.args) >= 512 OR pg_column_compression(NEW.args) IS NOT NULL)
              AND jsonb_path_exists(NEW.args, 'strict $.**{65}'::jsonpath)))
    EXECUTE FUNCTION pgfleet.jobs_args_refused();
