-- The first key of a head's advisory locks (functions/head_lower.sql): its queue and
-- priority. Two heads that share it only make each other's moves more careful.
CREATE OR REPLACE FUNCTION pgfleet.head_lock(queue text, priority integer) RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT hashtext(queue || '/' || priority) & 2147483647 $$;

