-- Puts a head before every waiting row (schema.sql, queue_heads): rows written with
-- triggers off (session_replication_role = replica, a restore with --disable-triggers,
-- logical replication) lowered no head, and a claim would never reach them. A queue and
-- priority without a head gets one at its front; a head past a waiting row goes back to
-- it. The next move takes them forward. Maintenance runs it once a minute and each worker
-- when it connects: each head costs one walk from its priority's front, over the dead
-- entries a long snapshot keeps. Returns how many heads it made or lowered.
CREATE OR REPLACE FUNCTION pgfleet.find_heads() RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    made    integer;
    lowered integer := 0;
    h       pgfleet.queue_heads;
    hit     record;
BEGIN
    WITH RECURSIVE g (queue, priority) AS (
        (SELECT j.queue, j.priority FROM pgfleet.jobs j WHERE j.state = 'queued'
          ORDER BY j.queue, j.priority LIMIT 1)
        UNION ALL
        SELECT n.queue, n.priority
          FROM g CROSS JOIN LATERAL (
               SELECT j.queue, j.priority FROM pgfleet.jobs j
                WHERE j.state = 'queued' AND (j.queue, j.priority) > (g.queue, g.priority)
                ORDER BY j.queue, j.priority LIMIT 1) n
    )
    INSERT INTO pgfleet.queue_heads (queue, priority, run_at, id)
    SELECT g.queue, g.priority, '-infinity', 0 FROM g
    ON CONFLICT (queue, priority) DO NOTHING;
    GET DIAGNOSTICS made = ROW_COUNT;
    FOR h IN SELECT * FROM pgfleet.queue_heads x ORDER BY x.queue, x.priority LOOP
        SELECT f.run_at, f.id INTO hit FROM pgfleet.jobs f
         WHERE f.queue = h.queue AND f.state = 'queued' AND f.priority = h.priority
           AND (f.run_at, f.id) < (h.run_at, h.id)
         ORDER BY f.run_at, f.id LIMIT 1;
        IF FOUND THEN
            UPDATE pgfleet.queue_heads x SET run_at = hit.run_at, id = hit.id
             WHERE x.queue = h.queue AND x.priority = h.priority
               AND (hit.run_at, hit.id) < (x.run_at, x.id);
            lowered := lowered + 1;
        END IF;
    END LOOP;
    RETURN made + lowered;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.find_heads() FROM PUBLIC;
