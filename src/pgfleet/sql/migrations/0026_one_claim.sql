-- One claim for every queue: pgfleet.claim_jobs reads the queue's flow control at each
-- claim, so every role that claims (may UPDATE pgfleet.jobs) needs the flow-control tables,
-- which until now only the limited claim read. The function bodies come from functions/.
SET LOCAL search_path = pg_catalog, pg_temp;

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
            'GRANT SELECT, INSERT, UPDATE, DELETE ON pgfleet.queue_limits, '
            'pgfleet.queue_starts TO %s', role);
    END LOOP;
END;
$$;

SET LOCAL search_path = pg_catalog, pgfleet;
