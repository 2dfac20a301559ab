-- A writer's part of the heads (schema.sql, queue_heads): a waiting row of (queue, priority)
-- at key (run_at, id) is about to exist, so the head is lowered to it if it is past it.
--
-- The writer's transaction also holds, until it ends, a shared advisory lock named by the
-- queue and priority and by the second its key starts in. pgfleet.move_heads reads those
-- locks: while a writer's rows are not yet visible, no head moves past the second they
-- start in, so none is left behind a head.
CREATE OR REPLACE FUNCTION pgfleet.head_lower(queue text, priority integer,
                                              run_at timestamptz, id bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    h pgfleet.queue_heads;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(pgfleet.head_lock(head_lower.queue, head_lower.priority),
                                         pgfleet.head_second(head_lower.run_at));
    SELECT * INTO h FROM pgfleet.queue_heads x
     WHERE x.queue = head_lower.queue AND x.priority = head_lower.priority;
    IF NOT FOUND THEN
        INSERT INTO pgfleet.queue_heads AS x (queue, priority, run_at, id)
        VALUES (head_lower.queue, head_lower.priority, head_lower.run_at, head_lower.id)
        ON CONFLICT (queue, priority) DO UPDATE
           SET run_at = excluded.run_at, id = excluded.id
         WHERE (excluded.run_at, excluded.id) < (x.run_at, x.id);
    ELSIF (head_lower.run_at, head_lower.id) < (h.run_at, h.id) THEN
        UPDATE pgfleet.queue_heads x SET run_at = head_lower.run_at, id = head_lower.id
         WHERE x.queue = head_lower.queue AND x.priority = head_lower.priority
           AND (head_lower.run_at, head_lower.id) < (x.run_at, x.id);
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.head_lower(text, integer, timestamptz, bigint) FROM PUBLIC;
