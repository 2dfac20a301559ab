-- Bulk enqueue without the unique-key machinery when a batch has no unique key.
--
-- * enqueue_jobs inserts a batch in which no row has a unique key with a plain INSERT:
--   ON CONFLICT makes every row a speculative insertion (a token, a second WAL record to
--   confirm it, the arbiter index checked first), which a row without a key can never
--   need. Such a batch returns NULL task and unique_key: pgfleet.enqueue_many reads only
--   the ids of rows without a key. A batch with any key takes the statement of 0009.
-- * Same signature and result, so grants on the function (`pgfleet grants`) carry over.
-- * A NULL array (rather than an array of NULLs) is what pgfleet.enqueue_many sends for a
--   column that is NULL in every row; unnest() pads it with NULLs as before.

SET LOCAL search_path = pg_catalog, pg_temp;

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
BEGIN
    IF pg_catalog.array_ndims(pg_catalog.array_remove(enqueue_jobs.unique_keys, NULL))
       IS NULL THEN
        -- No row has a key (array_remove leaves an empty array, whose ndims is NULL).
        RETURN QUERY
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                       unique_key, meta, concurrency_key)
        SELECT q.queue, x.t, x.a::jsonb, x.p,
               coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => x.d)),
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
    SELECT q.queue, x.t, x.a::jsonb, x.p,
           coalesce(x.r, pg_catalog.now() + pg_catalog.make_interval(secs => x.d)),
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
