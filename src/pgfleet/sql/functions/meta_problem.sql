-- Why meta breaks the limits, or NULL: an object of at most 64 KiB of JSON text.
CREATE OR REPLACE FUNCTION pgfleet.meta_problem(meta jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_catalog.jsonb_typeof(meta) <> 'object'
            THEN 'meta must be a JSON object, got ' || pg_catalog.jsonb_typeof(meta)
        WHEN pg_catalog.octet_length(meta::text) > 65536
            THEN 'meta is ' || pg_catalog.octet_length(meta::text)
                 || ' bytes of JSON text, over the limit of 65536 bytes'
        WHEN pg_catalog.jsonb_path_exists(meta, 'strict $.**{17}'::jsonpath)
            THEN 'meta is nested deeper than 16 levels'
    END
$$;
