-- A fence no later claim can repeat, ids that do not repeat after a failover, and the
-- epoch a claim checks (schema.sql explains each; functions/ holds the new bodies).
--
-- * jobs.fence: drawn at random by every claim. Jobs running now keep NULL: the previous
--   release's workers that run them fence their writes by attempt.
-- * jobs.id: from pgfleet.job_ids, offset by the WAL timeline, continuing where the identity
--   left off. A timeline above 1 makes the next ids jump by 2^44 per timeline.
-- * The claim's result gains the fence column, so its function is made anew.
-- * Every role that claims (may UPDATE pgfleet.jobs) gets the sequence and the epoch.
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE pgfleet.jobs ADD COLUMN fence bigint;

CREATE SEQUENCE pgfleet.job_ids AS bigint;
SELECT setval('pgfleet.job_ids',
              greatest(coalesce((SELECT last_value FROM pgfleet.jobs_id_seq
                                  WHERE is_called), 0),
                       coalesce((SELECT max(id) FROM pgfleet.jobs), 0), 1),
              EXISTS (SELECT 1 FROM pgfleet.jobs) OR (SELECT is_called FROM pgfleet.jobs_id_seq));
ALTER TABLE pgfleet.jobs ALTER COLUMN id DROP IDENTITY;
ALTER TABLE pgfleet.jobs ALTER COLUMN id SET DEFAULT (
    pg_catalog.nextval('pgfleet.job_ids')
    + ((('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(
                   pg_catalog.pg_current_wal_lsn()), 1, 8)
        )::bit(32)::integer - 1)::bigint << 44));
ALTER SEQUENCE pgfleet.job_ids OWNED BY pgfleet.jobs.id;

CREATE TABLE pgfleet.epoch (
    one              boolean PRIMARY KEY DEFAULT true CHECK (one),
    system_id        bigint,
    timeline         integer,
    changed_at       timestamptz,
    claims_resume_at timestamptz,
    longest_lease    float8 NOT NULL DEFAULT 0
);
INSERT INTO pgfleet.epoch DEFAULT VALUES;

-- Its result type changes, so the claim is dropped and made again, keeping who may run it.
-- This body stands in until the functions' pass below gives it its file's.
CREATE TEMPORARY TABLE claim_callers ON COMMIT DROP AS
SELECT a.grantee::regrole::text AS role
  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
 WHERE p.oid = 'pgfleet.claim_jobs(text, integer, text, float8, integer, bigint, boolean,
                                   integer, timestamptz, bigint, bigint)'::regprocedure
   AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0;
DROP FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer, bigint, boolean,
                                 integer, timestamptz, bigint, bigint);
CREATE FUNCTION pgfleet.claim_jobs(
    queue text, max_jobs integer, worker text, lease float8, args_limit integer, held bigint,
    held_solo boolean, after_priority integer, after_run_at timestamptz, after_id bigint,
    max_bytes bigint
) RETURNS TABLE (id bigint, task text, args text, attempt integer, max_attempts integer,
                 args_size integer, wait_seconds float8, solo boolean, priority integer,
                 run_at timestamptz, meta text, more boolean, fence bigint)
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'pgfleet.claim_jobs: not yet replaced'; END $$;
REVOKE ALL ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer, bigint,
                                          boolean, integer, timestamptz, bigint, bigint)
    FROM PUBLIC;

DO $$
DECLARE
    role text;
BEGIN
    FOR role IN SELECT c.role FROM claim_callers c LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pgfleet.claim_jobs(text, integer, text, float8, integer,'
            ' bigint, boolean, integer, timestamptz, bigint, bigint) TO %s', role);
    END LOOP;
    FOR role IN
        SELECT DISTINCT a.grantee::regrole::text
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'pgfleet.jobs'::regclass AND a.privilege_type = 'UPDATE'
           AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE pgfleet.job_ids TO %s', role);
        EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE ON pgfleet.epoch TO %s', role);
    END LOOP;
END;
$$;

SET LOCAL search_path = pg_catalog, pgfleet;
