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

REVOKE ALL ON FUNCTION pgfleet.jobs_args_refused() FROM PUBLIC;
