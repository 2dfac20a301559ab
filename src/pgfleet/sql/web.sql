-- Named queries of the web UI (pgfleet.web.lists runs them by name). Everything the UI
-- can change goes through the store functions of queries.sql, as the CLI does; this file
-- only reads. The pool sets plan_cache_mode = force_custom_plan, so the optional filters
-- below ("%(x)s IS NULL OR ...") fold away before planning and each index stays usable.

-- name: jobs_page
-- One page of jobs, newest first, keyset-paged on the primary key: rows with
-- floor <= id <= through (inclusive, so the largest bigint id can be asked for without a
-- numeric bound the index cannot use). The caller narrows it to a bounded id window when a
-- filter has no index of its own (task, text search), so one page never reads more than
-- that window of history however rare the matches are.
-- A queued job whose run_at is still ahead shows as "scheduled", as on the overview; the
-- filter's `due` tells the two apart (NULL: either).
SELECT id, queue, task,
       CASE WHEN state = 'queued' AND run_at > now() THEN 'scheduled' ELSE state::text END
           AS state,
       priority, run_at, attempt, max_attempts,
       created_at, finished_at,
       -- The first line only: a traceback's other lines are for the job's page.
       left(split_part(last_error, E'\n', 1), 300) AS last_error
  FROM pgfleet.jobs
 WHERE id <= %(through)s AND id >= %(floor)s
   AND (%(state)s::pgfleet.job_state IS NULL OR state = %(state)s::pgfleet.job_state)
   AND (%(due)s::boolean IS NULL OR (run_at <= now()) = %(due)s::boolean)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(pattern)s::text IS NULL OR args::text ILIKE %(pattern)s
        OR last_error ILIKE %(pattern)s OR errors::text ILIKE %(pattern)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: newest_id_below
-- Where the next window of a windowed page starts: an empty stretch of ids (pruned
-- history, or one hand-written huge id far above the rest) is skipped in one probe.
SELECT max(id) FROM pgfleet.jobs WHERE id < %(below)s

-- name: schedule_names
-- Every schedule that ever fired, by a loose index scan of schedule_runs_latest_idx: one
-- probe per name, however many runs each one has.
WITH RECURSIVE names(name) AS (
    (SELECT schedule FROM pgfleet.schedule_runs ORDER BY schedule LIMIT 1)
    UNION ALL
    SELECT (SELECT r.schedule FROM pgfleet.schedule_runs r
             WHERE r.schedule > n.name ORDER BY r.schedule LIMIT 1)
      FROM names n WHERE n.name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL

-- name: schedule_recent_runs
-- The last few fire times of each schedule with their jobs' states (NULL once pruned).
SELECT s.name, r.fire_time, r.job_id, j.state::text
  FROM unnest(%(names)s::text[]) AS s(name)
  CROSS JOIN LATERAL (
        SELECT fire_time, job_id FROM pgfleet.schedule_runs
         WHERE schedule = s.name ORDER BY fire_time DESC LIMIT %(per_schedule)s) r
  LEFT JOIN pgfleet.jobs j ON j.id = r.job_id
 ORDER BY s.name, r.fire_time DESC

-- name: job
-- One job for its page, clipped here in the database: a hand-written row of tens of
-- megabytes never reaches the UI's memory whole. Args arrive as the start of their text
-- with their length; errors as the latest attempts only, each error cut with a note of
-- how much was left out; an `errors` value that is not a list as the start of its text.
SELECT id, queue, left(task, %(clip)s) AS task, state::text AS state,
       CASE WHEN state = 'queued' AND run_at > now() THEN 'scheduled' ELSE state::text END
           AS shown_state,
       priority, run_at,
       attempt, max_attempts, left(lease_holder, %(clip)s) AS lease_holder,
       lease_expires_at, created_at, started_at, finished_at,
       left(last_error, %(clip)s) AS last_error, left(unique_key, %(clip)s) AS unique_key,
       left(concurrency_key, %(clip)s) AS concurrency_key,
       crashes, refunds, snoozes, cancel_requested_at,
       -- The run of the latest attempt: to its end, or so far while it runs.
       CASE WHEN started_at IS NULL OR NOT isfinite(started_at) THEN NULL
            WHEN state = 'running' THEN extract(epoch FROM now() - started_at)
            WHEN finished_at IS NOT NULL AND isfinite(finished_at)
            THEN extract(epoch FROM finished_at - started_at) END::float8 AS run_seconds,
       left(args::text, %(clip)s) AS args, length(args::text) AS args_length,
       left(meta::text, %(clip)s) AS meta, length(meta::text) AS meta_length,
       left(result::text, %(clip)s) AS result, length(result::text) AS result_length,
       left(progress::text, %(clip)s) AS progress, length(progress::text) AS progress_length,
       CASE WHEN jsonb_typeof(errors) = 'array' THEN jsonb_array_length(errors) END
           AS error_count,
       CASE WHEN jsonb_typeof(errors) = 'array' THEN (
           SELECT jsonb_agg(CASE
                  WHEN jsonb_typeof(e -> 'error') = 'string'
                       AND length(e ->> 'error') > %(clip)s
                  THEN e || jsonb_build_object('error', left(e ->> 'error', %(clip)s)
                       || format(E'\n… (%%s more characters)',
                                 length(e ->> 'error') - %(clip)s))
                  WHEN length(e::text) > %(clip)s THEN to_jsonb(left(e::text, %(clip)s))
                  ELSE e END ORDER BY n)::text
             -- The slice is taken in one call: a condition on each element would
             -- detoast the whole column again for every one of thousands.
             FROM jsonb_array_elements(jsonb_path_query_array(
                      errors, '$[$from to last]', jsonb_build_object(
                          'from', greatest(0, jsonb_array_length(errors) - %(attempts)s))))
                  WITH ORDINALITY AS x(e, n))
       ELSE left(errors::text, %(clip)s) END AS errors
  FROM pgfleet.jobs WHERE id = %(id)s

-- name: job_result
-- A job's whole result for its download, or NULL: at most %(limit)s characters are read,
-- one more to tell the caller it was longer.
SELECT left(result::text, %(limit)s + 1) FROM pgfleet.jobs WHERE id = %(id)s

-- name: matching_ids
-- The ids of the jobs a bulk action over "every job matching the filter" acts on, newest
-- first and at most %(limit)s: the filter of jobs_page over the whole table. Each action
-- then changes only those of them in a state it applies to.
SELECT id FROM pgfleet.jobs
 WHERE id <= %(through)s AND id >= %(floor)s
   AND (%(state)s::pgfleet.job_state IS NULL OR state = %(state)s::pgfleet.job_state)
   AND (%(due)s::boolean IS NULL OR (run_at <= now()) = %(due)s::boolean)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(pattern)s::text IS NULL OR args::text ILIKE %(pattern)s
        OR last_error ILIKE %(pattern)s OR errors::text ILIKE %(pattern)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: activity
-- The last hour of a queue (or of every queue, %(queue)s NULL) per minute: jobs that
-- succeeded and that died, and the p50 and p95 of their wait (run_at to start of the last
-- attempt) and run (start to finish). A read of jobs_finished_idx from the newest end, at
-- most %(rows)s rows: a busier hour is charted from its newest rows and the caller says
-- where they start. A queue's rows are picked from that same read, so a quiet queue in a
-- busy fleet shows what the newest rows hold of it. date_part, not extract: float8
-- arithmetic over 20,000 rows is cheaper than numeric.
WITH recent AS MATERIALIZED (
    SELECT queue, state, run_at, started_at, finished_at FROM pgfleet.jobs
     WHERE state IN ('succeeded', 'dead', 'cancelled')
       AND finished_at > now() - interval '1 hour' AND finished_at <= now()
     ORDER BY finished_at DESC
     LIMIT %(rows)s
), mine AS (
    SELECT state, finished_at,
           CASE WHEN isfinite(started_at) AND isfinite(run_at)
                THEN greatest(date_part('epoch', started_at - run_at), 0) END AS waited,
           CASE WHEN isfinite(started_at)
                THEN greatest(date_part('epoch', finished_at - started_at), 0) END AS ran
      FROM recent
     WHERE state <> 'cancelled' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
)
SELECT (date_part('epoch', date_trunc('minute', now()) - date_trunc('minute', finished_at))
        / 60)::int AS minutes_ago,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'dead') AS died,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY waited) AS wait_p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY waited) AS wait_p95,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY ran) AS run_p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY ran) AS run_p95,
       (SELECT count(*) FROM recent) AS rows_read,
       (SELECT date_part('epoch', now() - min(finished_at)) FROM recent) AS reach
  FROM mine
 GROUP BY 1
 ORDER BY 1

-- name: running_jobs
-- The running jobs of a queue, longest running first, at most %(limit)s: a read of the
-- running rows only (jobs_lease_expiry_idx holds nothing else).
SELECT id, left(task, 255) AS task, attempt, max_attempts, lease_holder, lease_expires_at,
       started_at, cancel_requested_at IS NOT NULL AS cancelling,
       CASE WHEN isfinite(started_at) THEN extract(epoch FROM now() - started_at) END::float8
           AS running_for,
       left(progress::text, 200) AS progress
  FROM pgfleet.jobs
 WHERE state = 'running' AND (%(queue)s::text IS NULL OR queue = %(queue)s)
 ORDER BY started_at, id
 LIMIT %(limit)s

-- name: held_jobs
-- The running jobs of each worker named, for the hosts page: at most %(per_worker)s each,
-- longest running first.
SELECT w.holder, j.id, left(j.task, 255) AS task, j.queue,
       CASE WHEN isfinite(j.started_at) THEN extract(epoch FROM now() - j.started_at)
            END::float8 AS running_for
  FROM unnest(%(holders)s::text[]) AS w(holder)
 CROSS JOIN LATERAL (
       SELECT id, task, queue, started_at FROM pgfleet.jobs
        WHERE state = 'running' AND lease_holder = w.holder
        ORDER BY started_at, id LIMIT %(per_worker)s) j
 ORDER BY w.holder, j.started_at, j.id
