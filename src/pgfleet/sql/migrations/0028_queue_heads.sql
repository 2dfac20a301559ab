-- Heads for the claims (schema.sql, queue_heads): a claim starts each priority's walk at
-- its head instead of the front of jobs_claim_idx, so the dead entries a long snapshot
-- keeps are not stepped over by every claim. Writers of waiting rows lower the heads
-- (two triggers); maintenance moves them (pgfleet.move_heads).
--
-- Each waiting row's queue and priority gets a head at its earliest run_at. The functions
-- made here stand in until the functions' pass gives them their files' bodies.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE TABLE pgfleet.queue_heads (
    queue         text NOT NULL,
    priority      integer NOT NULL,
    run_at        timestamptz NOT NULL,
    id            bigint NOT NULL,
    passed_run_at timestamptz,
    passed_id     bigint,
    PRIMARY KEY (queue, priority)
);
INSERT INTO pgfleet.queue_heads (queue, priority, run_at, id)
SELECT j.queue, j.priority, min(j.run_at), 0 FROM pgfleet.jobs j
 WHERE j.state = 'queued' GROUP BY j.queue, j.priority;

CREATE FUNCTION pgfleet.jobs_heads_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION pgfleet.jobs_heads_requeued() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

CREATE TRIGGER jobs_heads_inserted
    AFTER INSERT ON pgfleet.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.jobs_heads_inserted();
CREATE TRIGGER jobs_heads_requeued
    AFTER UPDATE OF state ON pgfleet.jobs FOR EACH ROW
    WHEN (NEW.state = 'queued' AND OLD.state <> 'queued')
    EXECUTE FUNCTION pgfleet.jobs_heads_requeued();

-- Every role that claims (may UPDATE pgfleet.jobs) reads the heads, and its maintenance
-- moves them.
CREATE FUNCTION pgfleet.move_heads() RETURNS integer
LANGUAGE plpgsql AS $$ BEGIN RETURN 0; END $$;
REVOKE ALL ON FUNCTION pgfleet.move_heads() FROM PUBLIC;
CREATE FUNCTION pgfleet.find_heads() RETURNS integer
LANGUAGE plpgsql AS $$ BEGIN RETURN 0; END $$;
REVOKE ALL ON FUNCTION pgfleet.find_heads() FROM PUBLIC;
DO $$
DECLARE
    role text;
BEGIN
    FOR role IN
        SELECT DISTINCT a.grantee::regrole::text
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'pgfleet.jobs'::regclass AND a.privilege_type = 'UPDATE'
           AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT SELECT, INSERT, UPDATE ON pgfleet.queue_heads TO %s', role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION pgfleet.move_heads() TO %s', role);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION pgfleet.find_heads() TO %s', role);
    END LOOP;
END;
$$;

SET LOCAL search_path = pg_catalog, pgfleet;
