-- Named queries. Each block starts with "-- name: NAME :CARDINALITY"; store.py runs them by
-- name and holds each result to its cardinality:
--   :one     exactly one row          :maybe   zero or one row      :many   any number of rows
--   :scalar  one row of one column    :exec    no result columns (the row count is returned)
-- Rows become store.py's row dataclasses by column name: every returned column is named as
-- a field (tests/unit/test_queries.py checks both sides against a migrated database).
-- Parameters use psycopg's %(name)s style.

-- name: enqueue :scalar
SELECT pgfleet.enqueue(%(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
                       now() + make_interval(secs => %(delay)s) , %(max_attempts)s, %(unique_key)s)

-- name: enqueue_at :scalar
SELECT pgfleet.enqueue(%(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
                       %(run_at)s, %(max_attempts)s, %(unique_key)s)

-- name: enqueue_many :many
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

-- name: existing_by_unique_key :many
-- Unique keys are scoped per task: (task, unique key) pairs, as two parallel arrays.
SELECT j.task, j.unique_key, j.id
  FROM pgfleet.jobs j
  JOIN unnest(%(tasks)s::text[], %(unique_keys)s::text[]) AS k(task, unique_key)
    ON j.task = k.task AND j.unique_key = k.unique_key
 WHERE j.state IN ('queued', 'running')

-- name: claim :many
-- R1: lock due rows of one queue in claim order through the partial index, skipping rows
-- another worker holds, then lease them in the same statement. A paused queue yields none.
-- A solo job (migration 0007) goes only to a worker that holds nothing, alone; a worker
-- holding one claims nothing more. A solo job among the locked rows stops a busy
-- worker's claim, so the worker drains and takes it next. after_*: the claim key
-- (priority, run_at, id) to start past, the last row of the worker's previous full claim
-- (NULL: from the head). Every claimed row leaves a dead entry at the head of
-- jobs_claim_idx that nothing removes during a drain (autovacuum ran 0 times in each drain
-- measured), and a claim from the head steps over all of them: 500-800 pages per claim
-- after 40,000-100,000 jobs. The worker goes back to the head when a claim comes back
-- short, on a notification and once per poll interval (pgfleet.worker.claim_cursor).
-- What the worker holds comes as
-- held / held_solo (the worker knows the jobs running in its process, which is what
-- containment is about); NULL counts its running rows instead, a scan of every running
-- row that a worker claiming thousands of times a second should not pay.
WITH held AS MATERIALIZED (
    SELECT count(*) AS jobs, coalesce(bool_or(solo), false) AS solo FROM pgfleet.jobs
     WHERE lease_holder = %(worker)s AND state = 'running'
), c AS MATERIALIZED (
    SELECT id, solo FROM pgfleet.jobs
     WHERE queue = %(queue)s AND state = 'queued' AND run_at <= now()
       AND NOT EXISTS (SELECT 1 FROM pgfleet.queues q WHERE q.name = %(queue)s AND q.paused)
       AND (%(after_id)s::bigint IS NULL
            OR (priority, run_at, id) > (%(after_priority)s::int, %(after_run_at)s::timestamptz,
                                         %(after_id)s::bigint))
       AND NOT coalesce(%(held_solo)s::bool, (SELECT h.solo FROM held h))
     ORDER BY priority, run_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE pgfleet.jobs j
   SET state = 'running', attempt = j.attempt + 1, lease_holder = %(worker)s,
       lease_expires_at = now() + make_interval(secs => %(lease)s), started_at = now()
  FROM c
 WHERE j.id = c.id
   AND (NOT EXISTS (SELECT 1 FROM c s WHERE s.solo)
        OR (c.id = (SELECT s.id FROM c s WHERE s.solo LIMIT 1)
            AND coalesce(%(held)s::bigint, (SELECT h.jobs FROM held h)) = 0))
RETURNING j.id, j.task,
          -- Args travel as text, and only within the limit: the worker decodes each job's
          -- args in its executor thread, so a hostile row (nested 2,000 deep, 60 MB) fails
          -- that job alone and is never loaded into the worker's memory.
          CASE WHEN octet_length(j.args::text) <= %(args_limit)s THEN j.args::text END AS args,
          j.attempt, j.max_attempts, octet_length(j.args::text) AS args_size,
          extract(epoch FROM now() - j.run_at)::float8 AS wait_seconds, j.solo,
          j.priority, j.run_at

-- name: complete_succeeded :many
-- R2: fenced by holder and attempt; a job whose lease was taken over is not touched. The
-- row is found by its primary key alone (migration 0011 dropped the holder index, whose
-- dead entries a completion used to walk); holder, attempt and state are checked on it.
UPDATE pgfleet.jobs j
   SET state = 'succeeded', finished_at = now(), lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS d(id, attempt)
 WHERE j.id = d.id AND j.attempt = d.attempt AND j.state = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id

-- name: complete_and_claim :many
-- complete_succeeded and claim in one autocommit statement: one round trip and one commit
-- per batch instead of BEGIN, two statements and COMMIT. Both parts see the same snapshot
-- and touch different rows (running ones, queued ones). The completion is fenced exactly
-- like complete_succeeded and the claim is claim's, held / held_solo given by the worker
-- (the jobs it keeps running after this batch). Rows: the ids completed (claimed false),
-- then the jobs claimed.
WITH done AS (
    UPDATE pgfleet.jobs j
       SET state = 'succeeded', finished_at = now(), lease_holder = NULL,
           lease_expires_at = NULL
      FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS d(id, attempt)
     WHERE j.id = d.id AND j.attempt = d.attempt AND j.state = 'running'
       AND j.lease_holder = %(worker)s
    RETURNING j.id
), c AS MATERIALIZED (
    SELECT id, solo FROM pgfleet.jobs
     WHERE queue = %(queue)s AND state = 'queued' AND run_at <= now()
       AND NOT EXISTS (SELECT 1 FROM pgfleet.queues q WHERE q.name = %(queue)s AND q.paused)
       AND (%(after_id)s::bigint IS NULL
            OR (priority, run_at, id) > (%(after_priority)s::int, %(after_run_at)s::timestamptz,
                                         %(after_id)s::bigint))
       AND NOT %(held_solo)s::bool
     ORDER BY priority, run_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE pgfleet.jobs j
       SET state = 'running', attempt = j.attempt + 1, lease_holder = %(worker)s,
           lease_expires_at = now() + make_interval(secs => %(lease)s), started_at = now()
      FROM c
     WHERE j.id = c.id
       AND (NOT EXISTS (SELECT 1 FROM c s WHERE s.solo)
            OR (c.id = (SELECT s.id FROM c s WHERE s.solo LIMIT 1) AND %(held)s::bigint = 0))
    RETURNING j.id, j.task,
              CASE WHEN octet_length(j.args::text) <= %(args_limit)s
                   THEN j.args::text END AS args,
              j.attempt, j.max_attempts, octet_length(j.args::text) AS args_size,
              extract(epoch FROM now() - j.run_at)::float8 AS wait_seconds, j.solo,
          j.priority, j.run_at
)
SELECT id, false AS claimed, NULL::text AS task, NULL::text AS args, NULL::int AS attempt,
       NULL::int AS max_attempts, NULL::int AS args_size, NULL::float8 AS wait_seconds,
       NULL::bool AS solo, NULL::int AS priority, NULL::timestamptz AS run_at
  FROM done
UNION ALL
SELECT id, true, task, args, attempt, max_attempts, args_size, wait_seconds, solo, priority,
       run_at
  FROM claimed

-- name: complete_failed :many
-- A failure retries after the given delay, or ends dead when attempts are spent or the
-- error is final (pgfleet.failed_attempt, migration 0004). Fenced like complete_succeeded.
UPDATE pgfleet.jobs j
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(j.attempt, j.max_attempts + j.refunds, j.run_at, j.errors,
                                         d.error, d.delay, d.final) f),
       lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(errors)s::text[],
              %(delays)s::float8[], %(finals)s::bool[]) AS d(id, attempt, error, delay, final)
 WHERE j.id = d.id AND j.attempt = d.attempt AND j.state = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id, j.state::text AS state, j.run_at

-- name: give_back :many
-- Shutdown: jobs this worker did not finish, whose threads are known stopped, go back. The
-- attempt number stays (it is the fence: a number never runs in two processes); the
-- attempt is refunded (refunds + 1) up to max_refunds times, after which a give-back
-- counts like any failed attempt. Due a second from now.
UPDATE pgfleet.jobs j
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(
                      j.attempt, j.max_attempts + least(j.refunds + 1, %(max_refunds)s),
                      j.run_at, j.errors,
                      CASE WHEN j.refunds < %(max_refunds)s
                           THEN 'given back: the worker stopped (attempt refunded)'
                           ELSE 'given back: the worker stopped (attempt counted: '
                                || %(max_refunds)s || ' refunds used)' END,
                      retry_in => 1) f),
       refunds = least(j.refunds + 1, %(max_refunds)s),
       lease_holder = NULL, lease_expires_at = NULL
 WHERE j.lease_holder = %(worker)s AND j.state = 'running'
   AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
RETURNING j.id

-- name: renew_leases :many
-- Only the jobs the worker knows it runs: a claim committed just before a crash may never
-- have reached the worker, and renewing that row too would hold it forever. Its lease
-- runs out and rescue_expired gives it back.
UPDATE pgfleet.jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
 WHERE lease_holder = %(worker)s AND state = 'running' AND id = ANY(%(ids)s::bigint[])
RETURNING id

-- name: held_by :many
-- The running jobs a dead worker held, for the rescue below to price their retries.
SELECT id, queue, attempt FROM pgfleet.jobs
 WHERE lease_holder = %(worker)s AND state = 'running'
 ORDER BY id

-- name: rescue_holder :many
-- R3a: the supervisor saw this worker exit; its running jobs failed with the reason, and
-- are due again after their `delay`. Every job counts the crash (0007). A job alone in
-- the process is charged the attempt, so a job that kills its process cannot loop
-- forever; jobs that `shared` it get the attempt back and run alone from now on, so
-- the next crash names the culprit without charging its neighbours.
UPDATE pgfleet.jobs j
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(
                      j.attempt,
                      CASE WHEN %(shared)s THEN j.attempt + 1 ELSE j.max_attempts + j.refunds END,
                      j.run_at, j.errors, %(error)s, d.delay,
                      logged_error => CASE WHEN %(shared)s
                                      THEN %(error)s || ' (beside other jobs: not charged)'
                                      END) f),
       attempt = j.attempt - CASE WHEN %(shared)s THEN 1 ELSE 0 END,
       crashes = j.crashes + 1, solo = j.solo OR %(shared)s,
       lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(delays)s::float8[]) AS d(id, delay)
 WHERE j.id = d.id AND j.lease_holder = %(worker)s AND j.state = 'running'
RETURNING j.id, j.queue, j.task, j.state::text AS state

-- name: rescue_expired :many
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
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(
                      j.attempt, j.max_attempts + j.refunds, j.run_at, j.errors,
                      'lease expired (worker ' || j.lease_holder || ' stopped heartbeating)',
                      logged_error => 'lease expired (worker ' || j.lease_holder || ')') f),
       lease_holder = NULL, lease_expires_at = NULL
  FROM c
 WHERE j.id = c.id
RETURNING j.id, j.queue, j.task, j.state::text AS state

-- name: prune_finished :exec
WITH c AS (
    SELECT id FROM pgfleet.jobs
     WHERE state IN ('succeeded', 'dead', 'cancelled')
       AND finished_at < now() - make_interval(secs => %(retention)s)
     ORDER BY finished_at
     LIMIT %(limit)s
)
DELETE FROM pgfleet.jobs j USING c WHERE j.id = c.id

-- name: retry_job :maybe
-- Manual retry of a dead or cancelled job: a fresh set of attempts, due now.
UPDATE pgfleet.jobs
   SET state = 'queued', attempt = 0, refunds = 0, run_at = now(), finished_at = NULL,
       lease_holder = NULL, lease_expires_at = NULL
 WHERE id = %(id)s AND state IN ('dead', 'cancelled')
RETURNING id, queue

-- name: retry_dead_of_queue :many
-- Every dead job of the queue whose unique key is free: not held by an unfinished job of
-- its task, and (when several dead jobs share it) only the newest of them. The others stay
-- dead; dead_keys_held names them.
UPDATE pgfleet.jobs j
   SET state = 'queued', attempt = 0, refunds = 0, run_at = now(), finished_at = NULL,
       lease_holder = NULL, lease_expires_at = NULL
 WHERE j.queue = %(queue)s AND j.state = 'dead'
   AND (j.unique_key IS NULL
        OR (NOT EXISTS (SELECT 1 FROM pgfleet.jobs h
                         WHERE h.task = j.task AND h.unique_key = j.unique_key
                           AND h.state IN ('queued', 'running'))
            AND j.id = (SELECT max(d.id) FROM pgfleet.jobs d
                         WHERE d.task = j.task AND d.unique_key = j.unique_key
                           AND d.queue = j.queue AND d.state = 'dead')))
RETURNING j.id, j.queue

-- name: dead_keys_held :many
-- After retry_dead_of_queue: the dead jobs of the queue left behind, each with the
-- unfinished job that holds its unique key.
SELECT d.id, d.task, d.unique_key, h.id AS holder
  FROM pgfleet.jobs d
  JOIN pgfleet.jobs h ON h.task = d.task AND h.unique_key = d.unique_key
                     AND h.state IN ('queued', 'running')
 WHERE d.queue = %(queue)s AND d.state = 'dead' AND d.unique_key IS NOT NULL
 ORDER BY d.id

-- name: still_ours :maybe
-- A task's fence: is its job still running under this holder at this attempt? FOR SHARE
-- holds the answer until the caller's transaction ends: a rescue or a completion of the
-- row waits for it, so a side effect written in that transaction is fenced.
SELECT id FROM pgfleet.jobs
 WHERE id = %(id)s AND state = 'running' AND lease_holder = %(worker)s
   AND attempt = %(attempt)s
   FOR SHARE

-- name: cancel_job :maybe
UPDATE pgfleet.jobs SET state = 'cancelled', finished_at = now()
 WHERE id = %(id)s AND state = 'queued'
RETURNING id

-- name: notify_queue :exec
SELECT FROM pgfleet.notify_queue(%(queue)s)

-- name: set_paused :exec
INSERT INTO pgfleet.queues (name, paused, updated_at) VALUES (%(queue)s, %(paused)s, now())
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()

-- name: get_job :maybe
-- Args and errors as text: store.get_job decodes them only when that is safe, so any row
-- prints (a row nested 2,000 deep once crashed the decoder).
SELECT id, queue, task, args::text AS args, state::text, priority, run_at, attempt, max_attempts,
       lease_holder, lease_expires_at, created_at, started_at, finished_at, last_error,
       errors::text AS errors, unique_key
  FROM pgfleet.jobs WHERE id = %(id)s

-- name: list_jobs :many
SELECT id, queue, task, state::text, priority, run_at, attempt, max_attempts, created_at,
       finished_at, last_error
  FROM pgfleet.jobs
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(state)s::text IS NULL OR state = %(state)s::pgfleet.job_state)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: register_process :exec
INSERT INTO pgfleet.processes (id, host, pid, kind, queue, supervisor)
VALUES (%(id)s, %(host)s, %(pid)s, %(kind)s, %(queue)s, %(supervisor)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()

-- name: heartbeat_process :exec
UPDATE pgfleet.processes SET heartbeat_at = now() WHERE id = %(id)s

-- name: unregister_process :exec
DELETE FROM pgfleet.processes WHERE id = %(id)s

-- name: prune_processes :exec
DELETE FROM pgfleet.processes
 WHERE heartbeat_at < now() - make_interval(secs => %(stale_after)s)

-- name: queue_counts :many
-- Gauges for the metrics and `pgfleet status`. "queued" counts due jobs; future ones are
-- "scheduled". One branch per state, so each reads only its own partial index and the
-- finished history is never scanned.
SELECT queue, CASE WHEN run_at > now() THEN 'scheduled' ELSE 'queued' END AS state,
       count(*) AS count
  FROM pgfleet.jobs WHERE state = 'queued' GROUP BY 1, 2
UNION ALL
SELECT queue, 'running', count(*) FROM pgfleet.jobs WHERE state = 'running' GROUP BY 1
UNION ALL
SELECT queue, 'dead', count(*) FROM pgfleet.jobs WHERE state = 'dead' GROUP BY 1

-- name: oldest_waiting :many
SELECT queue, extract(epoch FROM now() - min(run_at))::float8 AS seconds
  FROM pgfleet.jobs
 WHERE state = 'queued' AND run_at <= now()
 GROUP BY queue

-- name: paused_queues :many
SELECT name FROM pgfleet.queues WHERE paused

-- name: finished_last_minute :many
SELECT queue, count(*) AS count FROM pgfleet.jobs
 WHERE state IN ('succeeded', 'dead') AND finished_at > now() - interval '1 minute'
 GROUP BY queue

-- name: processes :many
SELECT id, host, pid, kind, queue, supervisor,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age
  FROM pgfleet.processes ORDER BY host, kind, queue NULLS FIRST, pid

-- name: heartbeat_ages :many
-- The metrics' per-host view: the stalest heartbeat of each host's processes of one kind.
SELECT host, kind, extract(epoch FROM now() - min(heartbeat_at))::float8 AS seconds
  FROM pgfleet.processes GROUP BY host, kind

-- name: db_now :scalar
-- The scheduler's only clock: every host agrees on the server's time.
SELECT now()

-- name: schedule_last_runs :many
-- The latest recorded fire time of each named schedule (NULL if it never fired), one
-- index probe per schedule on schedule_runs_latest_idx.
SELECT s.name, r.fire_time
  FROM unnest(%(names)s::text[]) AS s(name)
  LEFT JOIN LATERAL (
        SELECT fire_time FROM pgfleet.schedule_runs
         WHERE schedule = s.name ORDER BY fire_time DESC LIMIT 1) r ON true

-- name: schedule_run_insert :maybe
-- The cross-host arbiter: the second insert of a (schedule, fire time) returns no row,
-- after waiting for the first one's transaction if that is still open.
INSERT INTO pgfleet.schedule_runs (schedule, fire_time) VALUES (%(schedule)s, %(fire_time)s)
ON CONFLICT (schedule, fire_time) DO NOTHING
RETURNING fire_time

-- name: schedule_run_enqueue :one
-- Runs in the transaction of schedule_run_insert: the job and its run record commit
-- together or not at all. run_at NULL means now(), so a late catch-up runs at once.
UPDATE pgfleet.schedule_runs
   SET job_id = pgfleet.enqueue(%(task)s, %(args)s::jsonb, %(queue)s, %(priority)s, NULL,
                                %(max_attempts)s, NULL)
 WHERE schedule = %(schedule)s AND fire_time = %(fire_time)s
RETURNING job_id

-- name: schedule_last_run_jobs :many
-- `pgfleet cron list`: each schedule's latest run and the state of its job (NULL once the
-- job was pruned).
SELECT s.name, r.fire_time, r.job_id, j.state::text AS state
  FROM unnest(%(names)s::text[]) AS s(name)
  LEFT JOIN LATERAL (
        SELECT fire_time, job_id FROM pgfleet.schedule_runs
         WHERE schedule = s.name ORDER BY fire_time DESC LIMIT 1) r ON true
  LEFT JOIN pgfleet.jobs j ON j.id = r.job_id

-- name: max_job_id :scalar
SELECT coalesce(max(id), 0) AS max_id FROM pgfleet.jobs

-- name: jobs_created_since :many
-- The enqueue counter without a counter row on the enqueue path: count ids past the last
-- one seen (a range scan of the primary key). A transaction that commits after a pass
-- with an id below the watermark is not counted; the undercount is that small window.
SELECT queue, count(*) AS count, max(id) AS max_id FROM pgfleet.jobs WHERE id > %(after)s
 GROUP BY queue

-- name: queue_known :scalar
-- The CLI's warning for a mistyped queue name: does any job or process name this queue?
-- Indexed places first (a process, a waiting or a dead job); the scan of the whole table
-- that follows runs only for a name found nowhere else, and stops at its first row.
SELECT EXISTS (SELECT 1 FROM pgfleet.processes WHERE queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM pgfleet.jobs WHERE queue = %(queue)s AND state = 'queued')
    OR EXISTS (SELECT 1 FROM pgfleet.jobs WHERE queue = %(queue)s AND state = 'dead')
    OR EXISTS (SELECT 1 FROM pgfleet.jobs WHERE queue = %(queue)s)
