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
SELECT id, queue, task, state::text AS state, priority, run_at, attempt, max_attempts,
       created_at, finished_at, left(last_error, 300) AS last_error
  FROM pgfleet.jobs
 WHERE id <= %(through)s AND id >= %(floor)s
   AND (%(state)s::pgfleet.job_state IS NULL OR state = %(state)s::pgfleet.job_state)
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
SELECT id, queue, left(task, %(clip)s) AS task, state::text AS state, priority, run_at,
       attempt, max_attempts, left(lease_holder, %(clip)s) AS lease_holder,
       lease_expires_at, created_at, started_at, finished_at,
       left(last_error, %(clip)s) AS last_error, left(unique_key, %(clip)s) AS unique_key,
       left(args::text, %(clip)s) AS args, length(args::text) AS args_length,
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
