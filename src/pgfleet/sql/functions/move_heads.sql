-- Moves the heads of the claims (schema.sql, queue_heads) forward, once per maintenance
-- pass. Returns how many heads moved.
--
-- A head moves to its priority's first waiting row that this statement sees (stepping over
-- the dead entries left since the last move), never past now(), and never past the second
-- a writer whose rows are not visible yet holds a lock on (functions/head_lower.sql).
--
-- One case is left to the next move: a writer that took its lock after this move read the
-- locks and read the head before this move committed. Its row is then below the new head
-- and not lowered. So each move first rechecks the stretch the previous one passed over:
-- such a writer's rows are visible by then, or its lock is still held.
-- Heads another session is moving or lowering are left for the next pass.
CREATE OR REPLACE FUNCTION pgfleet.move_heads() RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    h      pgfleet.queue_heads;
    held   integer;
    hit    record;
    to_at  timestamptz;
    to_id  bigint;
    moved  integer := 0;
    -- The second each head's writers' invisible rows start in, at the earliest.
    writers CONSTANT jsonb := (
        SELECT coalesce(jsonb_object_agg(k.lock, k.second), '{}')
          FROM (SELECT l.classid::bigint AS lock, min(l.objid::bigint) AS second
                  FROM pg_locks l
                 WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
                   AND l.database = (SELECT d.oid FROM pg_database d
                                      WHERE d.datname = current_database())
                 GROUP BY 1) k);
BEGIN
    FOR h IN SELECT * FROM pgfleet.queue_heads x ORDER BY x.queue, x.priority
               FOR UPDATE SKIP LOCKED
    LOOP
        held := (writers ->> pgfleet.head_lock(h.queue, h.priority)::text)::integer;
        to_at := h.run_at;
        to_id := h.id;
        IF h.passed_run_at IS NOT NULL THEN
            -- The previous move's stretch: a row committed in it since, or a writer still
            -- open since before, brings the head back.
            SELECT f.run_at, f.id INTO hit FROM pgfleet.jobs f
             WHERE f.queue = h.queue AND f.state = 'queued' AND f.priority = h.priority
               AND (f.run_at, f.id) >= (h.passed_run_at, h.passed_id)
               AND (f.run_at, f.id) < (h.run_at, h.id)
             ORDER BY f.run_at, f.id LIMIT 1;
            IF FOUND THEN
                to_at := hit.run_at;
                to_id := hit.id;
            END IF;
        ELSE
            SELECT f.run_at, f.id INTO hit FROM pgfleet.jobs f
             WHERE f.queue = h.queue AND f.state = 'queued' AND f.priority = h.priority
               AND (f.run_at, f.id) >= (h.run_at, h.id)
             ORDER BY f.run_at, f.id LIMIT 1;
            IF FOUND AND hit.run_at <= now() THEN
                to_at := hit.run_at;
                to_id := hit.id;
            ELSE
                to_at := greatest(h.run_at, now());
                to_id := CASE WHEN to_at = h.run_at THEN h.id ELSE 0 END;
            END IF;
        END IF;
        IF held IS NOT NULL
           AND (to_at, to_id) > ('2020-01-01 00:00:00+00'::timestamptz
                                 + make_interval(secs => held), 0::bigint) THEN
            to_at := '2020-01-01 00:00:00+00'::timestamptz + make_interval(secs => held);
            to_id := 0;
        END IF;
        IF h.passed_run_at IS NOT NULL THEN
            UPDATE pgfleet.queue_heads x
               SET run_at = least(to_at, x.run_at),
                   id = CASE WHEN (to_at, to_id) < (x.run_at, x.id) THEN to_id ELSE x.id END,
                   passed_run_at = NULL, passed_id = NULL
             WHERE x.queue = h.queue AND x.priority = h.priority;
        ELSIF (to_at, to_id) > (h.run_at, h.id) THEN
            UPDATE pgfleet.queue_heads x
               SET run_at = to_at, id = to_id, passed_run_at = h.run_at, passed_id = h.id
             WHERE x.queue = h.queue AND x.priority = h.priority;
            moved := moved + 1;
        END IF;
    END LOOP;
    RETURN moved;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.move_heads() FROM PUBLIC;
