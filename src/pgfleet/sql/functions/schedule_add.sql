-- A schedule kept in the database instead of a config file: every scheduler fires it,
-- once per fire time across hosts, and it survives reloads and restarts. The name must be
-- free (not in any config, not added before). `pgfleet cron add` checks the expression
-- and the time zone first; a scheduler logs one error for a bad one and fires nothing.
--   SELECT pgfleet.schedule_add('cleanup', '*/5 * * * *', 'myapp.tasks.cleanup');
CREATE OR REPLACE FUNCTION pgfleet.schedule_add(
    name text, cron text, task text, args jsonb DEFAULT '{}', timezone text DEFAULT 'UTC',
    queue text DEFAULT 'default', priority integer DEFAULT 0, max_delay float8 DEFAULT 3600
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    problem text;
BEGIN
    IF length(coalesce(schedule_add.name, '')) NOT BETWEEN 1 AND 255
       OR length(coalesce(schedule_add.cron, '')) NOT BETWEEN 1 AND 200
       OR length(coalesce(schedule_add.task, '')) NOT BETWEEN 1 AND 255
       OR length(coalesce(schedule_add.queue, '')) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'pgfleet.schedule_add: name, cron, task and queue must be non-empty'
            ' (at most 255, 200, 255 and 128 characters)' USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(schedule_add.args) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'pgfleet.schedule_add: args must be a JSON object'
            USING ERRCODE = '22023';
    END IF;
    -- The limits every job's args and names meet: a fire's enqueue would refuse them, and
    -- the name and expression are printed in logs.
    problem := coalesce(pgfleet.args_problem(schedule_add.args),
                        pgfleet.names_problem(schedule_add.task, schedule_add.queue,
                                              NULL, NULL));
    IF problem IS NULL AND (schedule_add.name || schedule_add.cron)
                           OPERATOR(pg_catalog.~) '[\x01-\x1f\x7f-\x9f]' THEN
        problem := 'name and cron must not contain control characters';
    END IF;
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pgfleet.schedule_add: %', problem USING ERRCODE = '22023';
    END IF;
    IF schedule_add.priority IS NULL OR schedule_add.priority NOT BETWEEN -1000 AND 1000
       OR schedule_add.max_delay IS NULL OR NOT schedule_add.max_delay > 0
       OR schedule_add.max_delay = 'Infinity'::float8 THEN
        RAISE EXCEPTION 'pgfleet.schedule_add: priority must be in -1000..1000 and'
            ' max_delay a positive number of seconds' USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgfleet.schedules (name, source, definition)
    VALUES (schedule_add.name, 'runtime', jsonb_build_object(
        'cron', schedule_add.cron, 'timezone', coalesce(schedule_add.timezone, 'UTC'),
        'task', schedule_add.task, 'args', schedule_add.args, 'queue', schedule_add.queue,
        'priority', schedule_add.priority, 'enabled', true,
        'max_delay', schedule_add.max_delay))
    ON CONFLICT ON CONSTRAINT schedules_pkey DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgfleet.schedule_add: a schedule named % exists already',
            quote_literal(schedule_add.name) USING ERRCODE = '23505';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.schedule_add(name text, cron text, task text, args jsonb,
    timezone text, queue text, priority integer, max_delay float8) FROM PUBLIC;
