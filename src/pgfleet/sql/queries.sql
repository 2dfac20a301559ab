-- Named queries. Each block starts with "-- name: NAME :CARDINALITY"; store.py runs them by
-- name and holds each result to its cardinality:
--   :one     exactly one row          :maybe   zero or one row      :many   any number of rows
--   :scalar  one row of one column    :exec    no result columns (the row count is returned)
-- Rows become store.py's row dataclasses by column name: every returned column is named as
-- a field (tests/unit/test_queries.py checks both sides against a migrated database).
-- Parameters use psycopg's %(name)s style.

-- name: enqueue :one
-- NULL queue or max_attempts takes the configured defaults (see pgfleet.enqueue_job).
-- Parameters are cast to the function's types, for the reason given at claim.
SELECT e.job_id, e.created
  FROM pgfleet.enqueue_job(%(task)s::text, %(args)s::jsonb, %(queue)s::text,
                           %(priority)s::int, now() + make_interval(secs => %(delay)s::float8),
                           %(max_attempts)s::int, %(unique_key)s::text, %(meta)s::jsonb,
                           %(concurrency_key)s::text) AS e

-- name: enqueue_at :one
SELECT e.job_id, e.created
  FROM pgfleet.enqueue_job(%(task)s::text, %(args)s::jsonb, %(queue)s::text,
                           %(priority)s::int, %(run_at)s::timestamptz, %(max_attempts)s::int,
                           %(unique_key)s::text, %(meta)s::jsonb,
                           %(concurrency_key)s::text) AS e

-- name: enqueue_many :many
-- Rows whose unique key an unfinished job already holds are skipped here and looked up
-- afterwards with existing_by_unique_key. The arrays travel in binary (the b placeholders):
-- text arrays of thousands of elements cost a good part of the statement's time to parse.
SELECT e.id, e.task, e.unique_key
  FROM pgfleet.enqueue_jobs(%(tasks)b::text[], %(args)b::text[], %(queues)b::text[],
                            %(priorities)b::int[], %(run_ats)b::timestamptz[],
                            %(delays)b::float8[], %(max_attempts)b::int[],
                            %(unique_keys)b::text[], %(metas)b::text[],
                            %(concurrency_keys)b::text[]) AS e

-- name: enqueue_many_ids :scalar
-- A chunk in which no row has a unique key inserts every row: its ids as one bigint[] in
-- input order (enqueue_jobs inserts in the rows' ordinality; array_agg reads the function
-- scan in that order). One array spares the server a message and the client a tuple per row.
SELECT pg_catalog.array_agg(e.id)
  FROM pgfleet.enqueue_jobs(%(tasks)b::text[], %(args)b::text[], %(queues)b::text[],
                            %(priorities)b::int[], %(run_ats)b::timestamptz[],
                            %(delays)b::float8[], %(max_attempts)b::int[],
                            %(unique_keys)b::text[], %(metas)b::text[],
                            %(concurrency_keys)b::text[]) AS e

-- name: existing_by_unique_key :many
-- Unique keys are scoped per task: (task, unique key) pairs, as two parallel arrays.
SELECT k.task, k.unique_key, k.id
  FROM pgfleet.jobs_holding_keys(%(tasks)s::text[], %(unique_keys)s::text[]) AS k

-- name: claim :many
-- R1: lock and lease due rows of one queue in claim order, skipping rows other workers
-- hold (functions/claim_jobs.sql explains the walk, solo, after_*, held and max_bytes).
-- Parameters are cast to the function's types: psycopg sends None and str untyped, and
-- every claim is planned anew (force_custom_plan), so each would resolve the function again.
SELECT c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
       c.wait_seconds AS wait_seconds, c.solo, c.priority, c.run_at, c.meta, c.more, c.fence
  FROM pgfleet.claim_jobs(%(queue)s::text, %(limit)s::int, %(worker)s::text,
                          %(lease)s::float8, %(args_limit)s::int, %(held)s::bigint,
                          %(held_solo)s::bool, %(after_priority)s::int,
                          %(after_run_at)s::timestamptz, %(after_id)s::bigint,
                          %(max_bytes)s::bigint) AS c

-- name: publish_fallback_limits :exec
-- A worker's own flow control, for a queue no supervisor published limits for: the claim
-- follows it until one does (a published row is never overwritten here).
INSERT INTO pgfleet.queue_limits AS l (queue, global_concurrency, rate_limit, rate_period,
                                       key_concurrency, published_by)
VALUES (%(queue)s, %(global_concurrency)s, %(rate_limit)s, %(rate_period)s,
        coalesce(%(key_concurrency)s::int, 1), %(published_by)s)
ON CONFLICT DO NOTHING

-- name: queue_has_limits :scalar
-- Whether a supervisor published flow control for the queue (pgfleet.worker.claims).
SELECT EXISTS (SELECT 1 FROM pgfleet.queue_limits l
                WHERE l.queue = %(queue)s
                  AND (l.global_concurrency IS NOT NULL OR l.rate_limit IS NOT NULL
                       OR l.key_concurrency IS NOT NULL))

-- name: complete_succeeded :many
-- R2: fenced by the claim's fence (and holder), so a job whose lease was taken over is not
-- touched; the row is found by primary key and the fence checked on it. Fences and results
-- come as JSON objects keyed by id, parsed once (the sub-selects): a join with unnest() may
-- be planned as a nested loop re-reading the arrays for every running row.
-- `state::text`: here and in every write below that names its rows by id, the rows are
-- found by primary key. jobs_lease_expiry_idx matches `state = 'running'`, and it keeps an
-- entry for every job that ran while a long snapshot holds the xmin horizon.
UPDATE pgfleet.jobs j
   SET state = 'succeeded', finished_at = now(), lease_holder = NULL, lease_expires_at = NULL,
       result = (SELECT %(results)s::jsonb) -> j.id::text
 WHERE j.id = ANY(%(ids)s::bigint[])
   AND j.fence = ((SELECT %(fences)s::jsonb) ->> j.id::text)::bigint AND j.state::text = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id

-- name: complete_and_claim :many
-- complete_succeeded and claim in one autocommit statement (pgfleet.succeed_and_claim_jobs),
-- fenced and claimed as those two are: one round trip and one commit per batch. held /
-- held_solo count the jobs kept running after it. Rows: the completed ids as one array
-- (`done`; cheaper than a row per id), then one row per job claimed (`done` NULL).
SELECT c.done, c.id, c.task, c.args, c.attempt, c.max_attempts, c.args_size,
       c.wait_seconds, c.solo, c.priority, c.run_at, c.meta, c.more, c.fence
  FROM pgfleet.succeed_and_claim_jobs(%(ids)s::bigint[], %(fences)s::jsonb,
                                      %(results)s::jsonb, %(queue)s::text, %(limit)s::int,
                                      %(worker)s::text, %(lease)s::float8,
                                      %(args_limit)s::int, %(held)s::bigint,
                                      %(held_solo)s::bool, %(after_priority)s::int,
                                      %(after_run_at)s::timestamptz,
                                      %(after_id)s::bigint, %(max_bytes)s::bigint) AS c

-- name: complete_failed :many
-- A failure retries after the given delay, or ends dead when attempts are spent or the
-- error is final (pgfleet.failed_attempt). Fenced like complete_succeeded.
UPDATE pgfleet.jobs j
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(j.attempt, j.max_attempts + j.refunds, j.run_at, j.errors,
                                         d.error, d.delay, d.final) f),
       lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(errors)s::text[],
              %(delays)s::float8[], %(finals)s::bool[]) AS d(id, fence, error, delay, final)
 WHERE j.id = d.id AND j.fence = d.fence AND j.state::text = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id, j.state::text AS state, j.run_at

-- name: complete_cancelled :many
-- A running job cancelled by request ends cancelled. Fenced like complete_succeeded.
UPDATE pgfleet.jobs j
   SET state = 'cancelled', finished_at = now(), lease_holder = NULL, lease_expires_at = NULL,
       last_error = 'cancelled while running (attempt ' || j.attempt || ')'
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS d(id, fence)
 WHERE j.id = d.id AND j.fence = d.fence AND j.state::text = 'running'
   AND j.lease_holder = %(worker)s
RETURNING j.id

-- name: complete_snoozed :many
-- pgfleet.Snooze: back to queued after the delay without spending the attempt (the
-- attempt number is given back, like rescue_holder does for a shared crash). Fenced, and
-- bounded: a job that snoozed max_snoozes times is not returned (the worker fails it).
UPDATE pgfleet.jobs j
   SET state = 'queued', run_at = now() + make_interval(secs => d.delay),
       attempt = j.attempt - 1, snoozes = j.snoozes + 1,
       lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(delays)s::float8[])
       AS d(id, fence, delay)
 WHERE j.id = d.id AND j.fence = d.fence AND j.state::text = 'running'
   AND j.lease_holder = %(worker)s AND j.snoozes < %(max_snoozes)s
RETURNING j.id

-- name: write_progress :exec
-- What running tasks last reported (pgfleet.current_job().progress), written by the
-- worker's main thread at most about once a second per job. Fenced.
UPDATE pgfleet.jobs j SET progress = d.progress::jsonb
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(progress)s::text[])
       AS d(id, fence, progress)
 WHERE j.id = d.id AND j.fence = d.fence AND j.state::text = 'running'
   AND j.lease_holder = %(worker)s

-- name: cancels_requested :many
-- The jobs among `ids` this worker runs that someone asked to cancel (after a NOTIFY on
-- pgfleet_cancel naming this worker).
SELECT id FROM pgfleet.jobs
 WHERE id = ANY(%(ids)s::bigint[]) AND lease_holder = %(worker)s AND state = 'running'
   AND cancel_requested_at IS NOT NULL

-- name: cancel_jobs :many
-- Waiting jobs cancelled now, running ones marked and their workers told (pgfleet.cancel_jobs).
SELECT c.id, c.state FROM pgfleet.cancel_jobs(%(ids)s::bigint[], %(queue)s, %(task)s) AS c

-- name: job_outcome :maybe
-- A job's end as pgfleet.result sees it; with wait, its end will send a NOTIFY.
SELECT o.state, o.result::text AS result, o.last_error
  FROM pgfleet.job_outcome(%(id)s, %(wait)s) AS o

-- name: running_progress :many
-- `pgfleet status`: the running jobs that reported progress, newest first.
SELECT id, queue, task, progress::text AS progress FROM pgfleet.jobs
 WHERE state = 'running' AND progress IS NOT NULL
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: withdraw :many
-- Shutdown: jobs this worker claimed ahead and no thread started (the executor marked them
-- so none ever will) go back due now with their attempt number back by one, since no run
-- of it exists. They spend no refund (give_back does), or a few deploys could end a job
-- `dead` that never ran.
UPDATE pgfleet.jobs j
   SET state = 'queued', attempt = j.attempt - 1, run_at = now(),
       lease_holder = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS d(id, fence)
 WHERE j.id = d.id AND j.fence = d.fence AND j.lease_holder = %(worker)s
   AND j.state::text = 'running'
RETURNING j.id

-- name: give_back :many
-- Shutdown: jobs this worker did not finish, whose threads are known stopped, go back. The
-- attempt number stays (that run happened); the attempt is refunded (refunds + 1) up to max_refunds times, after which a give-back
-- counts like any failed attempt. Due a second from now. With ids, each fenced by its
-- fence; without (NULL), every job the holder still holds.
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
   AND (%(ids)s::bigint[] IS NULL
        OR (j.id, j.fence) IN (SELECT * FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[])))
RETURNING j.id

-- name: renew_leases :many
-- Only the jobs the worker knows it runs: a claim committed just before a crash may never
-- have reached the worker, and renewing it would hold it forever (rescue_stale takes it).
-- Each renewal advances beats, which rescuers watch instead of a clock. cancel_requested:
-- someone asked to cancel the job (the fallback when no NOTIFY came).
UPDATE pgfleet.jobs j SET lease_expires_at = now() + make_interval(secs => %(lease)s),
                          beats = j.beats + 1
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS d(id, fence)
 WHERE j.id = d.id AND j.fence = d.fence AND j.lease_holder = %(worker)s
   AND j.state::text = 'running'
RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested

-- name: held_by :many
-- The running jobs a dead worker held, for the rescue below to price their retries: with
-- their task's published backoff (task_defaults) when there is one.
SELECT j.id, j.queue, j.attempt, td.backoff AS task_backoff
  FROM pgfleet.jobs j LEFT JOIN pgfleet.task_defaults td ON td.task = j.task
 WHERE j.lease_holder = %(worker)s AND j.state = 'running'
 ORDER BY j.id

-- name: rescue_holder :many
-- R3a: the supervisor saw this worker exit. A job whose task ran in it last (`running`;
-- NULL: all) fails, counts the crash and is due after `delay`: charged when alone, so it
-- cannot loop; when `shared`, uncharged but solo from now on, so the next crash names the
-- culprit. Any other job goes back at once, uncharged, its attempt number back by one.
UPDATE pgfleet.jobs j
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(
                      j.attempt,
                      CASE WHEN NOT d.ran OR %(shared)s THEN j.attempt + 1
                           ELSE j.max_attempts + j.refunds END,
                      j.run_at, j.errors, %(error)s,
                      CASE WHEN d.ran THEN d.delay ELSE 0 END,
                      logged_error => CASE
                          WHEN NOT d.ran THEN %(error)s || ' (not running its task: not charged)'
                          WHEN %(shared)s THEN %(error)s || ' (beside other jobs: not charged)'
                          END) f),
       attempt = j.attempt - CASE WHEN NOT d.ran OR %(shared)s THEN 1 ELSE 0 END,
       -- Saturates at the bound of jobs_crashes_bound, so a hostile row cannot fail the rescue.
       crashes = least(j.crashes, 999999) + CASE WHEN d.ran THEN 1 ELSE 0 END,
       solo = j.solo OR (d.ran AND %(shared)s),
       lease_holder = NULL, lease_expires_at = NULL
  FROM (SELECT u.id, u.delay,
               %(running)s::bigint[] IS NULL OR u.id = ANY(%(running)s::bigint[]) AS ran
          FROM unnest(%(ids)s::bigint[], %(delays)s::float8[]) AS u(id, delay)) d
 WHERE j.id = d.id AND j.lease_holder = %(worker)s AND j.state::text = 'running'
RETURNING j.id, j.queue, j.task, j.state::text AS state, d.ran

-- name: rescue_gave_up :many
-- R3a for a worker that exited on purpose, unable to renew its leases (an outage): no task
-- is known to have done wrong, so nothing counts as a crash or becomes solo. A job whose
-- task ran in it (`running`; NULL: all) is given back as give_back does (refunded up to
-- max_refunds, then counted); any other job as rescue_holder does.
UPDATE pgfleet.jobs j
   SET (state, run_at, finished_at, last_error, errors) = (
           SELECT f.state, f.run_at, f.finished_at, f.last_error, f.errors
             FROM pgfleet.failed_attempt(
                      j.attempt,
                      CASE WHEN NOT d.ran THEN j.attempt + 1
                           ELSE j.max_attempts + least(j.refunds + 1, %(max_refunds)s) END,
                      j.run_at, j.errors,
                      CASE WHEN NOT d.ran
                           THEN %(error)s || ' (not running its task: not charged)'
                           WHEN j.refunds < %(max_refunds)s
                           THEN %(error)s || ' (attempt refunded)'
                           ELSE %(error)s || ' (attempt counted: ' || %(max_refunds)s
                                || ' refunds used)' END,
                      retry_in => CASE WHEN d.ran THEN 1 ELSE 0 END) f),
       attempt = j.attempt - CASE WHEN d.ran THEN 0 ELSE 1 END,
       refunds = CASE WHEN d.ran THEN least(j.refunds + 1, %(max_refunds)s)
                      ELSE j.refunds END,
       lease_holder = NULL, lease_expires_at = NULL
  FROM (SELECT x.id,
               %(running)s::bigint[] IS NULL OR x.id = ANY(%(running)s::bigint[]) AS ran
          FROM pgfleet.jobs x
         WHERE x.lease_holder = %(worker)s AND x.state = 'running') d
 WHERE j.id = d.id AND j.lease_holder = %(worker)s AND j.state = 'running'
RETURNING j.id, j.queue, j.task, j.state::text AS state, d.ran

-- name: running_leases :many
-- What a rescuer watches: who holds each running job, under which fence, after how many
-- renewals. pgfleet.maintenance.lease_watch calls a lease stale only when this stayed the same for a
-- whole lease of the watcher's own monotonic clock; no wall clock decides a rescue.
SELECT id, lease_holder AS holder, fence, beats FROM pgfleet.jobs
 WHERE state = 'running' AND lease_holder IS NOT NULL
 ORDER BY id

-- name: rescue_stale :many
-- R3b: the leases a watcher saw unrenewed for a whole lease belong to a host that vanished
-- or froze. A row is taken only if it is still exactly as watched: a renewal since then
-- (beats moved) or a new claim (fence moved) keeps it running. SKIP LOCKED lets the
-- maintenance process of every host run this at once.
WITH w AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(holders)s::text[], %(fences)s::bigint[],
                         %(beats)s::bigint[]) AS w(id, holder, fence, beats)
), c AS MATERIALIZED (
    SELECT j.id FROM pgfleet.jobs j
      JOIN w ON w.id = j.id AND w.holder = j.lease_holder
            AND w.fence IS NOT DISTINCT FROM j.fence AND w.beats = j.beats
     WHERE j.state = 'running'
     ORDER BY j.id
       FOR UPDATE OF j SKIP LOCKED
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

-- name: retry_jobs :many
-- Manual retry of many dead or cancelled jobs at once (the web UI's bulk retry), as
-- retry_job does each: only those whose unique key is free, and of several that share a
-- key only the newest; the others are left as they are.
UPDATE pgfleet.jobs j
   SET state = 'queued', attempt = 0, refunds = 0, run_at = now(), finished_at = NULL,
       lease_holder = NULL, lease_expires_at = NULL
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state IN ('dead', 'cancelled')
   AND (j.unique_key IS NULL
        OR (NOT EXISTS (SELECT 1 FROM pgfleet.jobs h
                         WHERE h.task = j.task AND h.unique_key = j.unique_key
                           AND h.state IN ('queued', 'running'))
            AND j.id = (SELECT max(d.id) FROM pgfleet.jobs d
                         WHERE d.task = j.task AND d.unique_key = j.unique_key
                           AND d.id = ANY(%(ids)s::bigint[])
                           AND d.state IN ('dead', 'cancelled'))))
RETURNING j.id, j.queue

-- name: delete_jobs :many
-- Jobs deleted by an operator: any not running (a running one is cancelled first, so its
-- worker is never left holding a row that is gone).
DELETE FROM pgfleet.jobs
 WHERE id = ANY(%(ids)s::bigint[]) AND state <> 'running'
RETURNING id

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
-- A task's fence: is its job still running under this run's fence? FOR SHARE holds the
-- answer until the caller's transaction ends: a rescue or a completion of the row waits
-- for it, so a side effect written in that transaction is fenced.
SELECT id FROM pgfleet.jobs
 WHERE id = %(id)s AND state = 'running' AND lease_holder = %(worker)s
   AND fence = %(fence)s
   FOR SHARE


-- name: notify_queue :exec
SELECT FROM pgfleet.notify_queue(%(queue)s)

-- name: set_paused :exec
INSERT INTO pgfleet.queues (name, paused, updated_at) VALUES (%(queue)s, %(paused)s, now())
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()

-- name: get_job :maybe
-- Args and errors as text: store.get_job decodes them only when that is safe, so any row
-- prints, even one nested too deep for the decoder.
SELECT id, queue, task, args::text AS args, state::text, priority, run_at, attempt, max_attempts,
       lease_holder, lease_expires_at, created_at, started_at, finished_at, last_error,
       errors::text AS errors, unique_key, meta::text AS meta, result::text AS result,
       progress::text AS progress, snoozes, cancel_requested_at,
       -- Why attempt may stand above max_attempts (refunded give-backs), and how many
       -- worker crashes the job was in.
       refunds, crashes
  FROM pgfleet.jobs WHERE id = %(id)s

-- name: list_jobs :many
SELECT id, queue, task, state::text, priority, run_at, attempt, max_attempts, created_at,
       finished_at, last_error
  FROM pgfleet.jobs
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(state)s::text IS NULL OR state = %(state)s::pgfleet.job_state)
   -- --meta key=value: the value compared as text, so 42 matches {"k": 42} and {"k": "42"}.
   AND NOT EXISTS (SELECT 1 FROM unnest(%(meta_keys)s::text[], %(meta_values)s::text[])
                                 AS m(key, value)
                    WHERE (meta ->> m.key) IS DISTINCT FROM m.value)
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
-- "scheduled". Each count stops at 10,001 (shown as "10,000+"), so that a read costs the
-- same with 10 or 1,000,000 jobs waiting and never touches the finished history.
-- Waiting jobs: one walk over jobs_claim_idx, one probe per (queue, priority). Within a
-- priority run_at is in index order, so due and future rows are each one index range; a
-- priority's range is skipped once its queue's count has passed the bound, and a queue
-- whose two counts have both passed it is left for the next one. ORDER BY run_at keeps
-- the planner on the index: with LIMIT alone it may pick a scan of the whole table.
WITH RECURSIVE walk AS (
    SELECT f.queue, f.priority, c.due, c.later
      FROM (SELECT queue, priority FROM pgfleet.jobs WHERE state = 'queued'
             ORDER BY queue, priority LIMIT 1) f
     CROSS JOIN LATERAL (
         SELECT (SELECT count(*) FROM (SELECT FROM pgfleet.jobs j
                  WHERE j.state = 'queued' AND j.queue = f.queue AND j.priority = f.priority
                    AND j.run_at <= now() ORDER BY j.run_at LIMIT 10001) x) AS due,
                (SELECT count(*) FROM (SELECT FROM pgfleet.jobs j
                  WHERE j.state = 'queued' AND j.queue = f.queue AND j.priority = f.priority
                    AND j.run_at > now() ORDER BY j.run_at LIMIT 10001) x) AS later) c
    UNION ALL
    SELECT n.queue, n.priority,
           CASE WHEN n.queue = w.queue THEN w.due ELSE 0 END + c.due,
           CASE WHEN n.queue = w.queue THEN w.later ELSE 0 END + c.later
      FROM walk w
     CROSS JOIN LATERAL (
         -- Priorities end at 1000: past it, the walk goes on to the next queue.
         SELECT j.queue, j.priority FROM pgfleet.jobs j
          WHERE j.state = 'queued'
            AND (j.queue, j.priority) > (w.queue, CASE WHEN w.due > 10000 AND w.later > 10000
                                                       THEN 1001 ELSE w.priority END)
          ORDER BY j.queue, j.priority LIMIT 1) n
     CROSS JOIN LATERAL (
         SELECT (SELECT count(*) FROM (SELECT FROM pgfleet.jobs j
                  WHERE j.state = 'queued' AND j.queue = n.queue AND j.priority = n.priority
                    AND j.run_at <= now() AND NOT (n.queue = w.queue AND w.due > 10000)
                  ORDER BY j.run_at LIMIT 10001) x) AS due,
                (SELECT count(*) FROM (SELECT FROM pgfleet.jobs j
                  WHERE j.state = 'queued' AND j.queue = n.queue AND j.priority = n.priority
                    AND j.run_at > now() AND NOT (n.queue = w.queue AND w.later > 10000)
                  ORDER BY j.run_at LIMIT 10001) x) AS later) c
), waiting AS (
    SELECT queue, least(max(due), 10001) AS due, least(max(later), 10001) AS later
      FROM walk GROUP BY queue
), dead_queues AS (
    -- The queues of dead jobs, one probe each of jobs_dead_idx.
    (SELECT queue FROM pgfleet.jobs WHERE state = 'dead' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM dead_queues d
     CROSS JOIN LATERAL (SELECT j.queue FROM pgfleet.jobs j
                          WHERE j.state = 'dead' AND j.queue > d.queue
                          ORDER BY j.queue LIMIT 1) n
)
SELECT queue, 'queued' AS state, due AS count FROM waiting WHERE due > 0
UNION ALL
SELECT queue, 'scheduled', later FROM waiting WHERE later > 0
UNION ALL
-- Running jobs are as many as the workers run: jobs_lease_expiry_idx holds only them.
SELECT queue, 'running', count(*) FROM pgfleet.jobs WHERE state = 'running' GROUP BY 1
UNION ALL
SELECT d.queue, 'dead', c.count
  FROM dead_queues d
 CROSS JOIN LATERAL (SELECT count(*) AS count FROM (SELECT FROM pgfleet.jobs j
                      WHERE j.state = 'dead' AND j.queue = d.queue LIMIT 10001) x) c

-- name: oldest_waiting :many
-- The oldest due job of each queue: the first row of each (queue, priority) in
-- jobs_claim_idx is that priority's earliest run_at, so one probe per pair answers, however
-- many jobs wait. A hand-written '-infinity' would fail the whole statement ("cannot
-- subtract infinite timestamps"): it counts as waiting since year 1, a finite age JSON and
-- metrics can carry.
WITH RECURSIVE pairs AS (
    (SELECT queue, priority FROM pgfleet.jobs WHERE state = 'queued'
      ORDER BY queue, priority LIMIT 1)
    UNION ALL
    SELECT n.queue, n.priority FROM pairs p
     CROSS JOIN LATERAL (SELECT j.queue, j.priority FROM pgfleet.jobs j
                          WHERE j.state = 'queued' AND (j.queue, j.priority) > (p.queue, p.priority)
                          ORDER BY j.queue, j.priority LIMIT 1) n
)
SELECT p.queue,
       extract(epoch FROM now() - GREATEST(min(f.run_at), '0001-01-01 00:00:00+00'))::float8
       AS seconds
  FROM pairs p
 CROSS JOIN LATERAL (SELECT j.run_at FROM pgfleet.jobs j
                      WHERE j.state = 'queued' AND j.queue = p.queue AND j.priority = p.priority
                      ORDER BY j.run_at LIMIT 1) f
 WHERE f.run_at <= now()
 GROUP BY p.queue

-- name: paused_queues :many
SELECT name FROM pgfleet.queues WHERE paused

-- name: finished_last_minute :many
SELECT queue, count(*) AS count FROM pgfleet.jobs
 WHERE state IN ('succeeded', 'dead') AND finished_at > now() - interval '1 minute'
 GROUP BY queue

-- name: processes :many
SELECT id, host, pid, kind, queue, supervisor, failed_queues,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age
  FROM pgfleet.processes ORDER BY host, kind, queue NULLS FIRST, pid

-- name: heartbeat_ages :many
-- The metrics' per-host view: the stalest heartbeat of each host's processes of one kind.
SELECT host, kind, extract(epoch FROM now() - min(heartbeat_at))::float8 AS seconds
  FROM pgfleet.processes GROUP BY host, kind

-- name: epoch_check :scalar
-- When the claims resume after the database changed under the fleet (a failover, a
-- restore), NULL when they are not held (functions/epoch_check.sql); the system identifier
-- is compared too.
SELECT pgfleet.epoch_check(%(lease)s::float8, true)

-- name: move_heads :scalar
-- Moves the claims' heads forward past the jobs claimed since (functions/move_heads.sql).
SELECT pgfleet.move_heads()

-- name: find_heads :scalar
-- Heads for waiting rows written with triggers off (functions/find_heads.sql).
SELECT pgfleet.find_heads()

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

-- name: publish_schedules :many
-- A scheduler's pass: its config's definitions go in, every schedule to fire comes out.
SELECT name, source, definition, paused
  FROM pgfleet.publish_schedules(%(holder)s, %(host)s, %(definitions)s::jsonb)

-- name: schedules_all :many
-- `pgfleet cron list`: every schedule in the database, config and runtime alike.
SELECT name, source, definition, paused, published_at FROM pgfleet.schedules ORDER BY name

-- name: schedule_live_holders :many
-- `pgfleet cron list`: what each scheduler seen in the last minute holds, to show the
-- hosts whose config disagrees with the published definition.
SELECT name, host, holder, definition, first_published_at FROM pgfleet.schedule_holders
 WHERE seen_at >= now() - interval '1 minute' ORDER BY name, host, holder

-- name: schedule_add :exec
SELECT FROM pgfleet.schedule_add(%(name)s, %(cron)s, %(task)s, %(args)s::jsonb, %(timezone)s,
                                 %(queue)s, %(priority)s, %(max_delay)s)

-- name: schedule_pause :exec
SELECT FROM pgfleet.schedule_pause(%(name)s, %(paused)s)

-- name: schedule_remove :exec
SELECT FROM pgfleet.schedule_remove(%(name)s)

-- name: schedule_run_now :scalar
SELECT pgfleet.schedule_run_now(%(name)s)

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

-- name: publish_task_defaults :exec
-- A supervisor's registered tasks' enqueue defaults, as parallel arrays. The current
-- config overwrites whatever is there, NULLs included (a declaration removed from the
-- code); identical rows are not rewritten, and rows go in name order so two hosts
-- publishing at once cannot deadlock.
INSERT INTO pgfleet.task_defaults AS d (task, queue, max_attempts, backoff)
SELECT t.task, t.queue, t.max_attempts, t.backoff::jsonb
  FROM unnest(%(tasks)s::text[], %(queues)s::text[], %(max_attempts)s::int[],
              %(backoffs)s::text[]) AS t (task, queue, max_attempts, backoff)
 ORDER BY t.task
ON CONFLICT (task) DO UPDATE
   SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts,
       backoff = EXCLUDED.backoff, updated_at = now()
 WHERE (d.queue, d.max_attempts, d.backoff)
       IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff)

-- name: publish_queue_defaults :exec
-- A supervisor's configured queues' max_attempts, as two parallel arrays; as above.
INSERT INTO pgfleet.queue_defaults AS d (queue, max_attempts)
SELECT q.queue, q.max_attempts
  FROM unnest(%(queues)s::text[], %(max_attempts)s::int[]) AS q (queue, max_attempts)
 ORDER BY q.queue
ON CONFLICT (queue) DO UPDATE SET max_attempts = EXCLUDED.max_attempts, updated_at = now()
 WHERE d.max_attempts IS DISTINCT FROM EXCLUDED.max_attempts

-- name: report_failed_queues :exec
-- A supervisor's failed queues, as its maintenance process last read them from the
-- arbiter; rewritten only when they changed.
UPDATE pgfleet.processes SET failed_queues = %(failed)s::jsonb
 WHERE id = %(id)s AND failed_queues IS DISTINCT FROM %(failed)s::jsonb


-- name: publish_limits :exec
-- What a supervisor's config says about its queues' flow control, as parallel arrays; a
-- queue without flow control is written with NULLs (key_concurrency too: its workers run
-- the plain claim), so a reload that drops a limit lifts it.
-- The last supervisor to start or reload wins for a queue that several configs name.
INSERT INTO pgfleet.queue_limits AS l (queue, global_concurrency, rate_limit, rate_period,
                                       key_concurrency, published_by, updated_at)
SELECT x.queue, x.global_concurrency, x.rate_limit, x.rate_period, x.key_concurrency,
       %(published_by)s, now()
  FROM unnest(%(queues)s::text[], %(global_concurrency)s::int[], %(rate_limit)s::int[],
              %(rate_period)s::float8[], %(key_concurrency)s::int[])
       AS x(queue, global_concurrency, rate_limit, rate_period, key_concurrency)
ON CONFLICT (queue) DO UPDATE
   SET global_concurrency = excluded.global_concurrency, rate_limit = excluded.rate_limit,
       rate_period = excluded.rate_period, key_concurrency = excluded.key_concurrency,
       published_by = excluded.published_by, updated_at = excluded.updated_at
 WHERE (l.global_concurrency, l.rate_limit, l.rate_period, l.key_concurrency)
       IS DISTINCT FROM (excluded.global_concurrency, excluded.rate_limit,
                         excluded.rate_period, excluded.key_concurrency)

-- name: flow_usage :many
-- `pgfleet status` and the held-back gauges: each queue with a published limit, its
-- running jobs, its starts in the current rate window, the keys at their limit, and the
-- due jobs each limit holds back now (what that limit alone would not let start).
-- Only the limited queues' partial-index entries are read, never the finished history:
-- running jobs are as many as the workers run (jobs_lease_expiry_idx,
-- jobs_running_key_idx), and waiting ones are counted up to 10,001 like queue_counts,
-- the keys' over the first 10,001 keyed waiting jobs of the queue (jobs_queued_key_idx).
WITH l AS (
    SELECT * FROM pgfleet.queue_limits
     WHERE global_concurrency IS NOT NULL OR rate_limit IS NOT NULL
        OR key_concurrency IS NOT NULL
), keys AS (
    SELECT coalesce(r.queue, d.queue) AS queue, coalesce(r.running, 0) AS running,
           coalesce(d.due, 0) AS due
      FROM (SELECT k.queue, k.concurrency_key, count(*) AS running
              FROM l JOIN pgfleet.jobs k ON k.queue = l.queue
             WHERE l.key_concurrency IS NOT NULL AND k.state = 'running'
               AND k.concurrency_key IS NOT NULL
             GROUP BY 1, 2) r
      FULL JOIN (
            SELECT l.queue, q.concurrency_key, count(*) FILTER (WHERE q.run_at <= now()) AS due
              FROM l CROSS JOIN LATERAL (
                   SELECT k.concurrency_key, k.run_at FROM pgfleet.jobs k
                    WHERE k.queue = l.queue AND k.state = 'queued'
                      AND k.concurrency_key IS NOT NULL
                    ORDER BY k.concurrency_key, k.priority, k.run_at, k.id LIMIT 10001) q
             WHERE l.key_concurrency IS NOT NULL
             GROUP BY 1, 2) d
        ON d.queue = r.queue AND d.concurrency_key = r.concurrency_key
)
SELECT l.queue, l.global_concurrency, l.rate_limit, l.rate_period, l.key_concurrency,
       r.running, w.starts, d.due,
       (SELECT count(*) FROM keys k
         WHERE k.queue = l.queue AND k.running >= coalesce(l.key_concurrency, 1)) AS keys_at_limit,
       CASE WHEN l.global_concurrency IS NULL THEN 0
            ELSE greatest(0, d.due - greatest(0, l.global_concurrency - r.running))
       END AS held_by_global,
       CASE WHEN l.rate_limit IS NULL THEN 0
            ELSE greatest(0, d.due - greatest(0, l.rate_limit - w.starts))
       END AS held_by_rate,
       (SELECT coalesce(sum(k.due - least(k.due, greatest(0, coalesce(l.key_concurrency, 1) - k.running))),
                        0)
          FROM keys k WHERE k.queue = l.queue)::bigint AS held_by_key
  FROM l
 CROSS JOIN LATERAL (SELECT count(*) AS running FROM pgfleet.jobs j
                      WHERE j.queue = l.queue AND j.state = 'running') r
 CROSS JOIN LATERAL (SELECT coalesce(sum(s.jobs), 0)::bigint AS starts
                       FROM pgfleet.queue_starts s
                      WHERE s.queue = l.queue AND l.rate_limit IS NOT NULL
                        AND s.at > clock_timestamp() - make_interval(secs => l.rate_period)) w
 CROSS JOIN LATERAL (
     -- Due jobs, one index range per priority of jobs_claim_idx, up to 10,001.
     WITH RECURSIVE walk AS (
         SELECT f.priority, c.due
           FROM (SELECT j.priority FROM pgfleet.jobs j
                  WHERE j.state = 'queued' AND j.queue = l.queue
                  ORDER BY j.priority LIMIT 1) f
          CROSS JOIN LATERAL (SELECT count(*) AS due FROM (SELECT FROM pgfleet.jobs j
                               WHERE j.state = 'queued' AND j.queue = l.queue
                                 AND j.priority = f.priority AND j.run_at <= now()
                               ORDER BY j.run_at LIMIT 10001) x) c
         UNION ALL
         SELECT n.priority, w.due + c.due
           FROM walk w
          CROSS JOIN LATERAL (SELECT j.priority FROM pgfleet.jobs j
                               WHERE j.state = 'queued' AND j.queue = l.queue
                                 AND j.priority > w.priority
                               ORDER BY j.priority LIMIT 1) n
          CROSS JOIN LATERAL (SELECT count(*) AS due FROM (SELECT FROM pgfleet.jobs j
                               WHERE j.state = 'queued' AND j.queue = l.queue
                                 AND j.priority = n.priority AND j.run_at <= now()
                               ORDER BY j.run_at LIMIT 10001) x) c
          WHERE w.due <= 10000
     )
     SELECT least(coalesce(max(due), 0), 10001) AS due FROM walk) d
 ORDER BY l.queue

-- name: xmin_holders :many
-- The oldest holder of each kind of the xmin horizon that keeps VACUUM from removing the
-- dead rows of pgfleet's tables: a backend's snapshot or transaction, a prepared
-- transaction, a replication slot, a standby's hot_standby_feedback. `xids` is age() of
-- the xmin it holds; `seconds` is how long its transaction has been open (backends and
-- prepared transactions only: a slot or a standby carries no time), and `oldest_seconds`
-- the longest of its kind. Bounded by the server's limits (max_connections,
-- max_prepared_transactions, max_replication_slots, max_wal_senders), never by history.
-- A snapshot in another database does not hold this one's tables, but a transaction id
-- there does: every new snapshot here sees it running. Walsenders are the standby kind,
-- and VACUUM's own xmin is ignored by the horizon. Without pg_read_all_stats (or
-- pg_monitor) another role's backend shows no type, state, query or start time: its xid
-- age still counts and its seconds are NULL, and walsenders and VACUUMs are told by
-- their pids in pg_stat_replication and pg_stat_progress_vacuum, which everyone sees.
WITH holders AS (
    SELECT 'backend' AS holder, a.pid, a.application_name AS name, a.state,
           extract(epoch FROM now() - coalesce(a.xact_start, a.query_start,
                                               a.backend_start))::float8 AS seconds,
           CASE WHEN a.datname = current_database()
                THEN greatest(age(a.backend_xmin), age(a.backend_xid))
                ELSE age(a.backend_xid) END::bigint AS xids,
           CASE WHEN a.state IS NOT NULL THEN left(a.query, 200) END AS query
      FROM pg_stat_activity a
     WHERE a.pid <> pg_backend_pid()
       AND coalesce(a.backend_type, '') NOT IN ('walsender', 'autovacuum worker',
                                                'autovacuum launcher')
       AND a.pid NOT IN (SELECT r.pid FROM pg_stat_replication r WHERE r.pid IS NOT NULL)
       AND a.pid NOT IN (SELECT v.pid FROM pg_stat_progress_vacuum v WHERE v.pid IS NOT NULL)
       AND (a.backend_xid IS NOT NULL
            OR (a.backend_xmin IS NOT NULL AND a.datname = current_database()))
    UNION ALL
    SELECT 'prepared', NULL, p.gid, 'prepared', extract(epoch FROM now() - p.prepared)::float8,
           age(p.transaction)::bigint, NULL
      FROM pg_prepared_xacts p
    UNION ALL
    SELECT 'slot', s.active_pid, s.slot_name::text,
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL, age(s.xmin)::bigint,
           NULL
      FROM pg_replication_slots s
     WHERE s.xmin IS NOT NULL
    UNION ALL
    SELECT 'standby', r.pid, r.application_name, r.state, NULL, age(r.backend_xmin)::bigint,
           NULL
      FROM pg_stat_replication r
     WHERE r.backend_xmin IS NOT NULL
), ranked AS (
    SELECT h.*, max(h.seconds) OVER (PARTITION BY h.holder) AS oldest_seconds,
           row_number() OVER (PARTITION BY h.holder
                              ORDER BY h.xids DESC, h.seconds DESC NULLS LAST) AS rank
      FROM holders h
)
SELECT holder, pid, name, state, seconds, oldest_seconds, xids, query
  FROM ranked WHERE rank = 1 ORDER BY xids DESC

-- name: claim_costs :one
-- What a held horizon costs the claim, as the server counts it: the dead rows of
-- pgfleet.jobs not yet vacuumed and the size of the claim's index, each with its
-- partitions' if it has any (a parent alone has neither). Statistics and sizes on disk,
-- one call per relation: no row and no other table is read.
WITH rel AS (
    SELECT to_regclass('pgfleet.jobs') AS jobs, to_regclass('pgfleet.jobs_claim_idx') AS idx
)
SELECT (SELECT coalesce(sum(pg_stat_get_dead_tuples(t.relid)), 0)
          FROM (SELECT rel.jobs AS relid UNION SELECT relid FROM pg_partition_tree(rel.jobs)) t
       )::bigint AS dead_tuples,
       (SELECT coalesce(sum(pg_relation_size(t.relid)), 0)
          FROM (SELECT rel.idx AS relid UNION SELECT relid FROM pg_partition_tree(rel.idx)) t
       )::bigint AS claim_index_bytes
  FROM rel

-- name: retire_schedule_holder :exec
-- A scheduler that stops no longer counts as live, but its rows stay a week: they keep
-- the date each definition was first published, so an older config started again later
-- does not count as new.
UPDATE pgfleet.schedule_holders SET seen_at = now() - interval '2 minutes'
 WHERE holder = %(holder)s
