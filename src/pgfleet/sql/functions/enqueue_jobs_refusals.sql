CREATE OR REPLACE FUNCTION pgfleet.enqueue_jobs_refusals(
    n integer, tasks text[], args text[], queues text[], priorities integer[],
    run_ats timestamptz[], delays float8[], max_attempts integer[], unique_keys text[],
    metas text[], concurrency_keys text[]
) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wrong text;
BEGIN
    IF tasks IS NULL OR pg_catalog.array_position(tasks, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgfleet.enqueue_jobs: tasks[%] is NULL: every job names its task',
            coalesce(pg_catalog.array_position(tasks, NULL), 1) USING ERRCODE = '22004';
    END IF;
    SELECT pg_catalog.string_agg(c.name || ' has ' || c.len, ', ') INTO wrong
      FROM (VALUES ('args', pg_catalog.cardinality(args)),
                   ('queues', pg_catalog.cardinality(queues)),
                   ('priorities', pg_catalog.cardinality(priorities)),
                   ('run_ats', pg_catalog.cardinality(run_ats)),
                   ('delays', pg_catalog.cardinality(delays)),
                   ('max_attempts', pg_catalog.cardinality(max_attempts)),
                   ('unique_keys', pg_catalog.cardinality(unique_keys)),
                   ('metas', pg_catalog.cardinality(metas)),
                   ('concurrency_keys', pg_catalog.cardinality(concurrency_keys))
           ) AS c(name, len)
     WHERE c.len IS NOT NULL AND c.len <> n;
    IF wrong IS NOT NULL THEN
        RAISE EXCEPTION 'pgfleet.enqueue_jobs: % tasks, but % (each array holds one element '
                        'per task, or is NULL for the defaults)', n, wrong
            USING ERRCODE = '2202E';
    END IF;
    IF EXISTS (SELECT FROM unnest(delays) AS d
                WHERE d < 0 OR d OPERATOR(pg_catalog.=) 'NaN'::float8
                   OR d OPERATOR(pg_catalog.=) 'Infinity'::float8) THEN
        RAISE EXCEPTION 'pgfleet.enqueue_jobs: delays must be finite and not negative'
            USING ERRCODE = '22023';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.enqueue_jobs_refusals(n integer, tasks text[], args text[], queues text[], priorities integer[], run_ats timestamp with time zone[], delays double precision[], max_attempts integer[], unique_keys text[], metas text[], concurrency_keys text[]) FROM PUBLIC;
