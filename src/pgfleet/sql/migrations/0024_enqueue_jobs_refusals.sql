-- pgfleet.enqueue_jobs, the bulk enqueue callable from SQL, says what is
-- wrong with its arrays instead of filing rows where the caller did not mean them:
-- * an array given (not NULL) must hold one element per task: a queues array shorter than
--   the tasks filed the rest in 'default' (unnest pads the shorter arrays with NULLs);
-- * tasks is required and holds no NULL (was a bare not-null violation);
-- * delays are finite and not negative, as pgfleet.enqueue_many refuses them in Python.
-- A NULL array, or a NULL in one, takes the column's default, as the Python client's NULL
-- arrays always did: args '{}', priority 0, no delay, the configured queue and attempts.
-- Same signature and result, so the grants on the function carry over.

SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION pgfleet.enqueue_jobs_refusals(
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

REVOKE ALL ON FUNCTION pgfleet.enqueue_jobs_refusals(integer, text[], text[], text[],
    integer[], timestamptz[], float8[], integer[], text[], text[], text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pgfleet.enqueue_jobs(
    tasks            text[],
    args             text[],
    queues           text[],
    priorities       integer[],
    run_ats          timestamptz[],
    delays           float8[],
    max_attempts     integer[],
    unique_keys      text[],
    metas            text[],
    concurrency_keys text[]
) RETURNS TABLE (id bigint, task text, unique_key text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n           integer := pg_catalog.cardinality(enqueue_jobs.tasks);
    keyless     boolean := pg_catalog.array_ndims(
                               pg_catalog.array_remove(enqueue_jobs.unique_keys, NULL)) IS NULL;
    one_queue   text;
    one_max     integer;
BEGIN
    PERFORM pgfleet.enqueue_jobs_refusals(n, enqueue_jobs.tasks, enqueue_jobs.args,
        enqueue_jobs.queues, enqueue_jobs.priorities, enqueue_jobs.run_ats,
        enqueue_jobs.delays, enqueue_jobs.max_attempts, enqueue_jobs.unique_keys,
        enqueue_jobs.metas, enqueue_jobs.concurrency_keys);
    -- array_fill has lower bound 1 and one dimension: an array of another shape, or
    -- queues shorter than the tasks (unnest pads them with NULLs), is not "one queue".
    IF n > 0
       AND enqueue_jobs.tasks[1] IS NOT NULL
       AND enqueue_jobs.tasks OPERATOR(pg_catalog.=)
           pg_catalog.array_fill(enqueue_jobs.tasks[1], ARRAY[n])
       AND (enqueue_jobs.queues IS NULL
            OR enqueue_jobs.queues OPERATOR(pg_catalog.=)
               pg_catalog.array_fill(enqueue_jobs.queues[1], ARRAY[n])) THEN
        SELECT coalesce(enqueue_jobs.queues[1], td.queue, 'default'), td.max_attempts
          INTO one_queue, one_max
          FROM (SELECT) AS one
          LEFT JOIN pgfleet.task_defaults td ON td.task = enqueue_jobs.tasks[1];
        one_max := coalesce(one_max, (SELECT qd.max_attempts FROM pgfleet.queue_defaults qd
                                       WHERE qd.queue = one_queue), 20);
        IF keyless THEN
            RETURN QUERY
            INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                           unique_key, meta, concurrency_key)
            SELECT one_queue, x.t, coalesce(x.a, '{}')::jsonb, coalesce(x.p, 0),
                   coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => coalesce(x.d, 0))),
                   coalesce(x.m, one_max), x.u, coalesce(x.mt::jsonb, '{}'::jsonb), x.ck
              FROM unnest(enqueue_jobs.tasks, enqueue_jobs.args, enqueue_jobs.queues,
                          enqueue_jobs.priorities, enqueue_jobs.run_ats, enqueue_jobs.delays,
                          enqueue_jobs.max_attempts, enqueue_jobs.unique_keys,
                          enqueue_jobs.metas, enqueue_jobs.concurrency_keys)
                   WITH ORDINALITY AS x(t, a, q, p, r, d, m, u, mt, ck, ord)
             ORDER BY x.ord
            RETURNING j.id, NULL::text, NULL::text;
            RETURN;
        END IF;
        RETURN QUERY
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                       unique_key, meta, concurrency_key)
        SELECT one_queue, x.t, coalesce(x.a, '{}')::jsonb, coalesce(x.p, 0),
               coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => coalesce(x.d, 0))),
               coalesce(x.m, one_max), x.u, coalesce(x.mt::jsonb, '{}'::jsonb), x.ck
          FROM unnest(enqueue_jobs.tasks, enqueue_jobs.args, enqueue_jobs.queues,
                      enqueue_jobs.priorities, enqueue_jobs.run_ats, enqueue_jobs.delays,
                      enqueue_jobs.max_attempts, enqueue_jobs.unique_keys,
                      enqueue_jobs.metas, enqueue_jobs.concurrency_keys)
               WITH ORDINALITY AS x(t, a, q, p, r, d, m, u, mt, ck, ord)
         ORDER BY x.ord
        ON CONFLICT (task, unique_key)
           WHERE unique_key IS NOT NULL
             AND state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state)
        DO NOTHING
        RETURNING j.id, j.task, j.unique_key;
        RETURN;
    END IF;
    IF keyless THEN
        -- No row has a key (array_remove leaves an empty array, whose ndims is NULL).
        RETURN QUERY
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                       unique_key, meta, concurrency_key)
        SELECT q.queue, x.t, coalesce(x.a, '{}')::jsonb, coalesce(x.p, 0),
               coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => coalesce(x.d, 0))),
               coalesce(x.m, td.max_attempts, qd.max_attempts, 20), x.u,
               coalesce(x.mt::jsonb, '{}'::jsonb), x.ck
          FROM unnest(enqueue_jobs.tasks, enqueue_jobs.args, enqueue_jobs.queues,
                      enqueue_jobs.priorities, enqueue_jobs.run_ats, enqueue_jobs.delays,
                      enqueue_jobs.max_attempts, enqueue_jobs.unique_keys,
                      enqueue_jobs.metas, enqueue_jobs.concurrency_keys)
               WITH ORDINALITY AS x(t, a, q, p, r, d, m, u, mt, ck, ord)
          LEFT JOIN pgfleet.task_defaults td ON td.task = x.t
         CROSS JOIN LATERAL (SELECT coalesce(x.q, td.queue, 'default') AS queue) AS q
          LEFT JOIN pgfleet.queue_defaults qd ON qd.queue = q.queue
         ORDER BY x.ord
        RETURNING j.id, NULL::text, NULL::text;
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                   unique_key, meta, concurrency_key)
    SELECT q.queue, x.t, coalesce(x.a, '{}')::jsonb, coalesce(x.p, 0),
           coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => coalesce(x.d, 0))),
           coalesce(x.m, td.max_attempts, qd.max_attempts, 20), x.u,
           coalesce(x.mt::jsonb, '{}'::jsonb), x.ck
      FROM unnest(enqueue_jobs.tasks, enqueue_jobs.args, enqueue_jobs.queues,
                  enqueue_jobs.priorities, enqueue_jobs.run_ats, enqueue_jobs.delays,
                  enqueue_jobs.max_attempts, enqueue_jobs.unique_keys, enqueue_jobs.metas,
                  enqueue_jobs.concurrency_keys)
           WITH ORDINALITY AS x(t, a, q, p, r, d, m, u, mt, ck, ord)
      LEFT JOIN pgfleet.task_defaults td ON td.task = x.t
     CROSS JOIN LATERAL (SELECT coalesce(x.q, td.queue, 'default') AS queue) AS q
      LEFT JOIN pgfleet.queue_defaults qd ON qd.queue = q.queue
     ORDER BY x.ord
    ON CONFLICT (task, unique_key)
       WHERE unique_key IS NOT NULL
         AND state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state)
    DO NOTHING
    RETURNING j.id, j.task, j.unique_key;
END;
$$;

-- Back to the path every migration runs with (pgfleet.migrations.migrate).
SET LOCAL search_path = pg_catalog, pgfleet;
