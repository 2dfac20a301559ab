-- Named queries of the web UI (pgfleet.web.queries runs them by name). Everything the UI
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
