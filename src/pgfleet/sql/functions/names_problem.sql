-- Why a job's names break the limits, or NULL. C0 and C1 controls and DEL are refused:
-- names are printed by the CLI and the web UI. The limits are payload.NAME_LIMITS.
CREATE OR REPLACE FUNCTION pgfleet.names_problem(task text, queue text, unique_key text,
                                      concurrency_key text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.btrim(task) = '' THEN 'task must not be empty'
        WHEN pg_catalog.btrim(queue) = '' THEN 'queue must not be empty'
        WHEN pg_catalog.length(task) > 255 THEN 'task is over 255 characters'
        WHEN pg_catalog.length(queue) > 128 THEN 'queue is over 128 characters'
        WHEN pg_catalog.length(unique_key) > 255 THEN 'unique_key is over 255 characters'
        WHEN pg_catalog.length(concurrency_key) > 255
            THEN 'concurrency_key is over 255 characters'
        WHEN (task || queue || coalesce(unique_key, '') || coalesce(concurrency_key, ''))
             OPERATOR(pg_catalog.~) '[\x01-\x1f\x7f-\x9f]'
            THEN 'task, queue, unique_key and concurrency_key must not contain control characters'
    END
$$;
