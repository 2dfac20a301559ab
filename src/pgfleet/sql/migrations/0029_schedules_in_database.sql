-- Schedules kept in the database. Every scheduler publishes its config's definitions of
-- its schedules; where hosts disagree about one name, the definition first published
-- latest among running schedulers is the one every scheduler fires. Schedules added at
-- runtime (pgfleet cron add, pgfleet.schedule_add) live in the same table. The functions
-- (publish_schedules, schedule_add and the rest) come from functions/.

SET LOCAL search_path = pg_catalog, pg_temp;

-- The schedules every scheduler fires: a config schedule's published definition (the
-- newest config's, chosen by pgfleet.publish_schedules) or a schedule added at runtime.
-- definition holds cron, timezone, task, args, queue, priority, enabled and max_delay.
CREATE TABLE pgfleet.schedules (
    name         text PRIMARY KEY,
    source       text NOT NULL CHECK (source IN ('config', 'runtime')),
    definition   jsonb NOT NULL CHECK (jsonb_typeof(definition) = 'object'),
    paused       boolean NOT NULL DEFAULT false,
    published_at timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- What each running scheduler's config says about each of its schedules. first_published_at
-- is when any scheduler first published that definition: the newest one among live
-- schedulers wins, so a host restarted with an older config does not take a name back.
CREATE TABLE pgfleet.schedule_holders (
    holder             text NOT NULL,
    host               text NOT NULL,
    name               text NOT NULL,
    definition         jsonb NOT NULL,
    first_published_at timestamptz NOT NULL,
    seen_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (holder, name)
);
CREATE INDEX schedule_holders_name_idx ON pgfleet.schedule_holders (name, seen_at);

-- The functions' signatures, so that the roles below can be granted them; every migrate
-- then gives them their bodies from functions/ (CREATE OR REPLACE keeps the grants).
CREATE FUNCTION pgfleet.publish_schedules(holder text, host text, definitions jsonb)
RETURNS TABLE (name text, source text, definition jsonb, paused boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RAISE EXCEPTION 'pgfleet: run pgfleet migrate to the end'; END; $$;
CREATE FUNCTION pgfleet.schedule_add(
    name text, cron text, task text, args jsonb DEFAULT '{}', timezone text DEFAULT 'UTC',
    queue text DEFAULT 'default', priority integer DEFAULT 0, max_delay float8 DEFAULT 3600
) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RAISE EXCEPTION 'pgfleet: run pgfleet migrate to the end'; END; $$;
CREATE FUNCTION pgfleet.schedule_pause(name text, paused boolean DEFAULT true) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RAISE EXCEPTION 'pgfleet: run pgfleet migrate to the end'; END; $$;
CREATE FUNCTION pgfleet.schedule_remove(name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RAISE EXCEPTION 'pgfleet: run pgfleet migrate to the end'; END; $$;
CREATE FUNCTION pgfleet.schedule_run_now(name text) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RAISE EXCEPTION 'pgfleet: run pgfleet migrate to the end'; END; $$;
REVOKE ALL ON FUNCTION pgfleet.publish_schedules(text, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.schedule_add(text, text, text, jsonb, text, text, integer,
                                            float8) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.schedule_pause(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.schedule_remove(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pgfleet.schedule_run_now(text) FROM PUBLIC;

-- The roles that fire schedules (may write schedule_runs) keep firing them: they get the
-- new tables and functions, as `pgfleet grants` gives the runtime role.
DO $$
DECLARE
    role text;
BEGIN
    FOR role IN
        SELECT DISTINCT a.grantee::regrole::text
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'pgfleet.schedule_runs'::regclass AND a.privilege_type = 'INSERT'
           AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.schedules, '
            'pgfleet.schedule_holders TO %s', role);
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.publish_schedules(text, text, jsonb), '
            'pgfleet.schedule_add(text, text, text, jsonb, text, text, integer, float8), '
            'pgfleet.schedule_pause(text, boolean), pgfleet.schedule_remove(text), '
            'pgfleet.schedule_run_now(text) TO %s', role);
    END LOOP;
END;
$$;

SET LOCAL search_path = pg_catalog, pgfleet;
