-- Whether the claims may go on, given the server they run on: NULL when they may, else the
-- time they resume.
--
-- After a failover to an asynchronous replica, or a restore, the database has gone back in
-- time: a claim it lost leaves its row waiting while that run goes on, on a host that has
-- not yet noticed. Such a run ends before its lease does (its worker stops a job it cannot
-- renew, docs/guarantees.md), and its lease was granted before the change was noticed. So
-- on a new timeline or system identifier the first claim holds every claim back for the
-- longest lease any claim asked for, plus a margin for the kill itself.
--
-- lease: the caller's lease, kept as the longest when it is. whole: also compare the system
-- identifier (pg_control_system() reads a file, so the maintenance process checks it once
-- per pass, not every claim).
-- Any role may run it; it runs as its caller, who needs UPDATE on pgfleet.epoch.
CREATE OR REPLACE FUNCTION pgfleet.epoch_check(lease float8, whole boolean)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    e        pgfleet.epoch;
    tl       integer := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))
                        ::bit(32)::integer;
    sys      bigint;
    -- What the kill of a run past its lease may take beyond the lease: the worker's own
    -- exit, or its keeper's kill of the task's processes.
    margin   constant float8 := 5;
BEGIN
    SELECT * INTO e FROM pgfleet.epoch x WHERE x.one;
    IF NOT FOUND THEN
        INSERT INTO pgfleet.epoch (timeline) VALUES (tl) ON CONFLICT DO NOTHING;
        RETURN NULL;
    END IF;
    sys := CASE WHEN whole THEN (SELECT s.system_identifier FROM pg_control_system() s)
                   ELSE e.system_id END;
    IF (e.timeline IS NOT NULL AND e.timeline <> tl)
       OR (e.system_id IS NOT NULL AND e.system_id <> sys) THEN
        -- Re-checked under the row's lock: of the claims that noticed at once, one moves it.
        UPDATE pgfleet.epoch x
           SET timeline = tl, system_id = sys, changed_at = now(),
               claims_resume_at = now() + make_interval(
                   secs => greatest(x.longest_lease, epoch_check.lease) + margin)
         WHERE x.one AND (x.timeline IS DISTINCT FROM tl OR x.system_id IS DISTINCT FROM sys)
        RETURNING * INTO e;
        IF NOT FOUND THEN
            SELECT * INTO e FROM pgfleet.epoch x WHERE x.one;
        END IF;
    ELSIF e.timeline IS NULL OR (e.system_id IS NULL AND sys IS NOT NULL)
          OR epoch_check.lease > e.longest_lease THEN
        -- First sight of the server, or a longer lease than any before.
        UPDATE pgfleet.epoch x
           SET timeline = coalesce(x.timeline, tl),
               system_id = coalesce(x.system_id, sys),
               longest_lease = greatest(x.longest_lease, epoch_check.lease)
         WHERE x.one
        RETURNING * INTO e;
    END IF;
    IF e.claims_resume_at > now() THEN
        RETURN e.claims_resume_at;
    END IF;
    RETURN NULL;
END;
$$;
