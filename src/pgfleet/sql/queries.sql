-- Named queries. Each block starts with "-- name: NAME"; store.py runs them by name.
-- Parameters use psycopg's %(name)s style.

-- name: enqueue
SELECT pgfleet.enqueue(%(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
                       now() + make_interval(secs => %(delay)s) , %(max_attempts)s, %(unique_key)s)

-- name: enqueue_at
SELECT pgfleet.enqueue(%(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
                       %(run_at)s, %(max_attempts)s, %(unique_key)s)

-- name: enqueue_many
-- Rows whose unique key an unfinished job already holds are skipped here and looked up
-- afterwards with existing_by_unique_key. The arrays travel in binary (the b placeholders):
-- eight text arrays of thousands of elements took a third of the statement's time.
INSERT INTO pgfleet.jobs (queue, task, args, priority, run_at, max_attempts, unique_key)
SELECT q, t, a::jsonb, p, coalesce(r, now() + make_interval(secs => d)), m, u
  FROM unnest(%(queues)b::text[], %(tasks)b::text[], %(args)b::text[], %(priorities)b::int[],
              %(run_ats)b::timestamptz[], %(delays)b::float8[], %(max_attempts)b::int[],
              %(unique_keys)b::text[])
       WITH ORDINALITY AS x(q, t, a, p, r, d, m, u, ord)
 ORDER BY ord
ON CONFLICT (task, unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'running')
DO NOTHING
RETURNING id, task, unique_key

-- name: existing_by_unique_key
-- Unique keys are scoped per task: (task, unique key) pairs, as two parallel arrays.
SELECT j.task, j.unique_key, j.id
  FROM pgfleet.jobs j
  JOIN unnest(%(tasks)s::text[], %(unique_keys)s::text[]) AS k(task, unique_key)
    ON j.task = k.task AND j.unique_key = k.unique_key
 WHERE j.state IN ('queued', 'running')

-- name: claim
-- R1: lock due rows of one queue in claim order through the partial index, skipping rows
-- another worker holds, then lease them in the same statement. A paused queue yields none.
WITH c AS MATERIALIZED (
    SELECT id FROM pgfleet.jobs
     WHERE queue = %(queue)s AND state = 'queued' AND run_at <= now()
       AND NOT EXISTS (SELECT 1 FROM pgfleet.queues q WHERE q.name = %(queue)s AND q.paused)
     ORDER BY priority, run_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE pgfleet.jobs j
   SET state = 'running', attempt = j.attempt + 1, lease_holder = %(worker)s,
       lease_expires_at = now() + make_interval(secs => %(lease)s), started_at = now()
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.task, j.args, j.attempt, j.max_attempts, pg_column_size(j.args),
          extract(epoch FROM now() - j.run_at)::float8

-- name: complete_succeeded
-- R2: fenced by holder and attempt; a job whose lease was taken over is not touched.
UPDATE pgfleet.jobs j
   SET state = 'succeeded', finished_at = now(), lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS d(id, attempt)
 WHERE j.id = d.id AND j.attempt = d.attempt AND j.state = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id

-- name: complete_failed
-- A failure retries after the given delay, or ends dead when attempts are spent or the
-- error is final. Fenced like complete_succeeded.
UPDATE pgfleet.jobs j
   SET state = CASE WHEN d.final OR j.attempt >= j.max_attempts
                    THEN 'dead'::pgfleet.job_state ELSE 'queued'::pgfleet.job_state END,
       run_at = CASE WHEN d.final OR j.attempt >= j.max_attempts
                     THEN j.run_at ELSE now() + make_interval(secs => d.delay) END,
       finished_at = CASE WHEN d.final OR j.attempt >= j.max_attempts THEN now() END,
       last_error = d.error,
       errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempt, 'at', now(), 'error', d.error)),
       lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(errors)s::text[],
              %(delays)s::float8[], %(finals)s::bool[]) AS d(id, attempt, error, delay, final)
 WHERE j.id = d.id AND j.attempt = d.attempt AND j.state = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id, j.state::text

-- name: give_back
-- Shutdown: jobs this worker did not finish go back without using up an attempt. They are
-- due a second from now: the giving process exits right after this commit, and its job
-- threads must be gone before another worker can claim the job.
UPDATE pgfleet.jobs
   SET state = 'queued', attempt = greatest(attempt - 1, 0),
       run_at = now() + interval '1 second',
       lease_holder = NULL, lease_expires_at = NULL
 WHERE lease_holder = %(worker)s AND state = 'running'
   AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
RETURNING id

-- name: renew_leases
-- Only the jobs the worker knows it runs: a claim committed just before a crash may never
-- have reached the worker, and renewing that row too would hold it forever. Its lease
-- runs out and rescue_expired gives it back.
UPDATE pgfleet.jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
 WHERE lease_holder = %(worker)s AND state = 'running' AND id = ANY(%(ids)s::bigint[])
RETURNING id

-- name: rescue_holder
-- R3a: the supervisor saw this worker exit; its running jobs failed with the reason.
-- The attempt stays counted, so a job that kills its process cannot loop forever.
UPDATE pgfleet.jobs
   SET state = CASE WHEN attempt >= max_attempts
                    THEN 'dead'::pgfleet.job_state ELSE 'queued'::pgfleet.job_state END,
       run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() END,
       finished_at = CASE WHEN attempt >= max_attempts THEN now() END,
       last_error = %(error)s,
       errors = errors || jsonb_build_array(jsonb_build_object(
                    'attempt', attempt, 'at', now(), 'error', %(error)s::text)),
       lease_holder = NULL, lease_expires_at = NULL
 WHERE lease_holder = %(worker)s AND state = 'running'
RETURNING id, queue, task, state::text

-- name: rescue_expired
-- R3b: leases that ran out belong to a host that vanished or froze. SKIP LOCKED lets the
-- maintenance process of every host run this at once.
WITH c AS MATERIALIZED (
    SELECT id FROM pgfleet.jobs
     WHERE state = 'running' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE pgfleet.jobs j
   SET state = CASE WHEN j.attempt >= j.max_attempts
                    THEN 'dead'::pgfleet.job_state ELSE 'queued'::pgfleet.job_state END,
       run_at = CASE WHEN j.attempt >= j.max_attempts THEN j.run_at ELSE now() END,
       finished_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
       last_error = 'lease expired (worker ' || j.lease_holder || ' stopped heartbeating)',
       errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempt, 'at', now(),
                    'error', 'lease expired (worker ' || j.lease_holder || ')')),
       lease_holder = NULL, lease_expires_at = NULL
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.queue, j.state::text

-- name: prune_finished
WITH c AS (
    SELECT id FROM pgfleet.jobs
     WHERE state IN ('succeeded', 'dead', 'cancelled')
       AND finished_at < now() - make_interval(secs => %(retention)s)
     ORDER BY finished_at
     LIMIT %(limit)s
)
DELETE FROM pgfleet.jobs j USING c WHERE j.id = c.id

-- name: retry_job
-- Manual retry of a dead or cancelled job: a fresh set of attempts, due now.
UPDATE pgfleet.jobs
   SET state = 'queued', attempt = 0, run_at = now(), finished_at = NULL,
       lease_holder = NULL, lease_expires_at = NULL
 WHERE id = %(id)s AND state IN ('dead', 'cancelled')
RETURNING id, queue

-- name: retry_dead_of_queue
UPDATE pgfleet.jobs
   SET state = 'queued', attempt = 0, run_at = now(), finished_at = NULL,
       lease_holder = NULL, lease_expires_at = NULL
 WHERE queue = %(queue)s AND state = 'dead'
RETURNING id, queue

-- name: cancel_job
UPDATE pgfleet.jobs SET state = 'cancelled', finished_at = now()
 WHERE id = %(id)s AND state = 'queued'
RETURNING id

-- name: notify_queue
SELECT pg_notify('pgfleet_jobs', %(queue)s)

-- name: set_paused
INSERT INTO pgfleet.queues (name, paused, updated_at) VALUES (%(queue)s, %(paused)s, now())
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()

-- name: get_job
SELECT id, queue, task, args, state::text, priority, run_at, attempt, max_attempts,
       lease_holder, lease_expires_at, created_at, started_at, finished_at, last_error,
       errors, unique_key
  FROM pgfleet.jobs WHERE id = %(id)s

-- name: list_jobs
SELECT id, queue, task, state::text, priority, run_at, attempt, max_attempts, created_at,
       finished_at, last_error
  FROM pgfleet.jobs
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(state)s::text IS NULL OR state = %(state)s::pgfleet.job_state)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: register_process
INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor)
VALUES (%(id)s, %(host)s, %(pid)s, %(kind)s, %(queue)s, %(supervisor)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()

-- name: heartbeat_process
UPDATE pgfleet.processes SET heartbeat_at = now() WHERE id = %(id)s

-- name: unregister_process
DELETE FROM pgfleet.processes WHERE id = %(id)s

-- name: prune_processes
DELETE FROM pgfleet.processes
 WHERE heartbeat_at < now() - make_interval(secs => %(stale_after)s)

-- name: queue_counts
-- Gauges for the metrics and `pgfleet status`. "queued" counts due jobs; future ones are
-- "scheduled". One branch per state, so each reads only its own partial index and the
-- finished history is never scanned.
SELECT queue, CASE WHEN run_at > now() THEN 'scheduled' ELSE 'queued' END, count(*)
  FROM pgfleet.jobs WHERE state = 'queued' GROUP BY 1, 2
UNION ALL
SELECT queue, 'running', count(*) FROM pgfleet.jobs WHERE state = 'running' GROUP BY 1
UNION ALL
SELECT queue, 'dead', count(*) FROM pgfleet.jobs WHERE state = 'dead' GROUP BY 1

-- name: oldest_waiting
SELECT queue, extract(epoch FROM now() - min(run_at))::float8
  FROM pgfleet.jobs
 WHERE state = 'queued' AND run_at <= now()
 GROUP BY queue

-- name: paused_queues
SELECT name FROM pgfleet.queues WHERE paused

-- name: finished_last_minute
SELECT queue, count(*) FROM pgfleet.jobs
 WHERE state IN ('succeeded', 'dead') AND finished_at > now() - interval '1 minute'
 GROUP BY queue

-- name: processes
SELECT id, host, pid, kind, queue, supervisor,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age
  FROM pgfleet.processes ORDER BY host, kind, queue NULLS FIRST, pid

-- name: db_now
-- The scheduler's only clock: every host agrees on the server's time.
SELECT now()

-- name: schedule_last_runs
-- The latest recorded fire time of each named schedule (NULL if it never fired), one
-- index probe per schedule on schedule_runs_latest_idx.
SELECT s.name, r.fire_time
  FROM unnest(%(names)s::text[]) AS s(name)
  LEFT JOIN LATERAL (
        SELECT fire_time FROM pgfleet.schedule_runs
         WHERE schedule = s.name ORDER BY fire_time DESC LIMIT 1) r ON true

-- name: schedule_run_insert
-- The cross-host arbiter: the second insert of a (schedule, fire time) returns no row,
-- after waiting for the first one's transaction if that is still open.
INSERT INTO pgfleet.schedule_runs (schedule, fire_time) VALUES (%(schedule)s, %(fire_time)s)
ON CONFLICT (schedule, fire_time) DO NOTHING
RETURNING fire_time

-- name: schedule_run_enqueue
-- Runs in the transaction of schedule_run_insert: the job and its run record commit
-- together or not at all. run_at NULL means now(), so a late catch-up runs at once.
UPDATE pgfleet.schedule_runs
   SET job_id = pgfleet.enqueue(%(task)s, %(args)s::jsonb, %(queue)s, %(priority)s, NULL,
                                %(max_attempts)s, NULL)
 WHERE schedule = %(schedule)s AND fire_time = %(fire_time)s
RETURNING job_id

-- name: schedule_last_run_jobs
-- `pgfleet cron list`: each schedule's latest run and the state of its job (NULL once the
-- job was pruned).
SELECT s.name, r.fire_time, r.job_id, j.state::text
  FROM unnest(%(names)s::text[]) AS s(name)
  LEFT JOIN LATERAL (
        SELECT fire_time, job_id FROM pgfleet.schedule_runs
         WHERE schedule = s.name ORDER BY fire_time DESC LIMIT 1) r ON true
  LEFT JOIN pgfleet.jobs j ON j.id = r.job_id

-- name: max_job_id
SELECT coalesce(max(id), 0) FROM pgfleet.jobs

-- name: jobs_created_since
-- The enqueue counter without a counter row on the enqueue path: count ids past the last
-- one seen (a range scan of the primary key). A transaction that commits after a pass
-- with an id below the watermark is not counted; the undercount is that small window.
SELECT queue, count(*), max(id) FROM pgfleet.jobs WHERE id > %(after)s GROUP BY queue
