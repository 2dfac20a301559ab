-- A scheduler's pass: record what its config says (definitions: an object of name ->
-- definition; holder: this scheduler, host: its host), then return what it fires: its
-- config's names, as published, and every runtime schedule.
-- For a config name, the definition fired is the one first published latest among
-- schedulers seen in the last minute: the newest config wins, whichever host asks, and a
-- host restarted with an older config does not win the name back. A name added at
-- runtime stays the runtime one. One lock serialises the passes of all hosts, so two
-- publishing at once see each other's rows.
--   SELECT * FROM pgfleet.publish_schedules('host-a:41:1f', 'host-a', '{}');
CREATE OR REPLACE FUNCTION pgfleet.publish_schedules(holder text, host text, definitions jsonb)
RETURNS TABLE (name text, source text, definition jsonb, paused boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    d record;
BEGIN
    IF jsonb_typeof(publish_schedules.definitions) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'pgfleet.publish_schedules: definitions must be a JSON object'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pgfleet.publish_schedules'));

    DELETE FROM pgfleet.schedule_holders h
     WHERE h.holder = publish_schedules.holder
       AND NOT publish_schedules.definitions ? h.name;
    FOR d IN SELECT e.key AS name, e.value AS definition
               FROM jsonb_each(publish_schedules.definitions) e ORDER BY e.key
    LOOP
        INSERT INTO pgfleet.schedule_holders AS h
               (holder, host, name, definition, first_published_at, seen_at)
        VALUES (publish_schedules.holder, publish_schedules.host, d.name, d.definition,
                coalesce((SELECT min(o.first_published_at) FROM pgfleet.schedule_holders o
                           WHERE o.name = d.name AND o.definition = d.definition),
                         -- After the lock, not the transaction's start: a pass that
                         -- waited for another host's publishes later than it.
                         clock_timestamp()),
                now())
        ON CONFLICT (holder, name) DO UPDATE
           SET definition = EXCLUDED.definition,
               first_published_at = CASE WHEN h.definition = EXCLUDED.definition
                                         THEN h.first_published_at
                                         ELSE EXCLUDED.first_published_at END,
               host = EXCLUDED.host,
               seen_at = now();
    END LOOP;
    -- A week without a pass: that scheduler is gone, and so is its vote for old definitions.
    DELETE FROM pgfleet.schedule_holders h WHERE h.seen_at < now() - interval '7 days';

    -- Each config name's winner among live schedulers, written only where it changed.
    INSERT INTO pgfleet.schedules AS s (name, source, definition, published_at)
    SELECT DISTINCT ON (h.name) h.name, 'config', h.definition, h.first_published_at
      FROM pgfleet.schedule_holders h
     WHERE h.seen_at >= now() - interval '1 minute'
     ORDER BY h.name, h.first_published_at DESC, h.definition::text
    ON CONFLICT (name) DO UPDATE
       SET definition = EXCLUDED.definition, published_at = EXCLUDED.published_at,
           updated_at = now()
     WHERE s.source = 'config'
       AND (s.definition IS DISTINCT FROM EXCLUDED.definition
            OR s.published_at IS DISTINCT FROM EXCLUDED.published_at);
    -- A config name no scheduler holds any more is gone from every config.
    DELETE FROM pgfleet.schedules s
     WHERE s.source = 'config'
       AND NOT EXISTS (SELECT 1 FROM pgfleet.schedule_holders h WHERE h.name = s.name);

    -- This scheduler fires the names of its own config and every runtime schedule: a
    -- name removed from one host's config still fires on the hosts that keep it.
    RETURN QUERY
    SELECT s.name, s.source, s.definition, s.paused FROM pgfleet.schedules s
     WHERE s.source = 'runtime' OR publish_schedules.definitions ? s.name
     ORDER BY s.name;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.publish_schedules(holder text, host text, definitions jsonb)
    FROM PUBLIC;
