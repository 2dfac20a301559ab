-- The current pgfleet schema: its type, tables, indexes and triggers.
--
-- A new database is built from this file and the functions in functions/ (one file per
-- function name). A database built before is brought here by the numbered migrations in
-- migrations/. tests/integration/test_schema.py builds one of each and compares their
-- pg_dump: a change to a table, an index or a trigger goes both here and in a new
-- migration. A function changes in its own file only: every `pgfleet migrate` replaces
-- every function with the body its file holds.
--
-- Everything lives in the pgfleet schema. Every name is schema-qualified, and the loader
-- sets search_path to pg_catalog first, so no object another role creates is ever used.

CREATE SCHEMA IF NOT EXISTS pgfleet;

-- A job's life: docs/states.md draws every transition and names the SQL that makes it.
CREATE TYPE pgfleet.job_state AS ENUM ('queued', 'running', 'succeeded', 'dead', 'cancelled');


-- Jobs --------------------------------------------------------------------------------

-- Job ids come from this sequence, offset by the server's WAL timeline (jobs.id).
CREATE SEQUENCE pgfleet.job_ids AS bigint;

CREATE TABLE pgfleet.jobs (
    -- The sequence's next value plus (timeline - 1) * 2^44. A promoted replica writes on a
    -- new timeline, so after a failover no id repeats one the old primary handed out for
    -- a job the replica never received: an id a producer got back names that job or none.
    id                  bigint PRIMARY KEY DEFAULT (
                            pg_catalog.nextval('pgfleet.job_ids')
                            + ((('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(
                                           pg_catalog.pg_current_wal_lsn()), 1, 8)
                                )::bit(32)::integer - 1)::bigint << 44)),
    queue               text NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),
    task                text NOT NULL CHECK (length(task) BETWEEN 1 AND 255),
    args                jsonb NOT NULL DEFAULT '{}'::jsonb,
    state               pgfleet.job_state NOT NULL DEFAULT 'queued',
    -- Lower runs first.
    priority            integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    run_at              timestamptz NOT NULL DEFAULT now(),
    -- The attempt that runs now or ran last (a count: it is not the fence, see fence).
    attempt             integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts        integer NOT NULL DEFAULT 20 CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_holder        text,
    lease_expires_at    timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    last_error          text,
    -- One entry per failed attempt, newest last.
    errors              jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- Held only while the job is queued or running (jobs_unique_key_idx).
    unique_key          text CHECK (length(unique_key) BETWEEN 1 AND 255),
    -- Attempts that ended with their process dying.
    crashes             integer NOT NULL DEFAULT 0 CHECK (crashes >= 0),
    -- Ran in a process that died: from then on it runs alone in its process.
    solo                boolean NOT NULL DEFAULT false,
    -- Attempts given back because pgfleet, not the task, ended them: a job may use
    -- max_attempts + refunds attempts.
    refunds             integer NOT NULL DEFAULT 0,
    meta                jsonb NOT NULL DEFAULT '{}'::jsonb,
    concurrency_key     text,
    result              jsonb,
    progress            jsonb,
    cancel_requested_at timestamptz,
    -- How often the task put its job back with Snooze.
    snoozes             integer NOT NULL DEFAULT 0,
    -- Someone waits for this job's end (pgfleet.result): only then does its end NOTIFY.
    result_waited       boolean NOT NULL DEFAULT false,
    -- Advanced by every lease renewal: a lease is stale when (holder, fence, beats) stays
    -- the same for a whole lease, timed by the watcher's own monotonic clock.
    beats               bigint NOT NULL DEFAULT 0,
    -- The fence: 62 random bits drawn by each claim. Every write of a running job (its
    -- outcome, renewal, progress, give-back) names it, so a run that lost its job changes
    -- nothing, even after a failover rewound the attempt number and the holder.
    fence               bigint,
    CONSTRAINT jobs_attempt_bound CHECK (attempt <= 1000000),
    CONSTRAINT jobs_crashes_bound CHECK (crashes <= 1000000),
    CONSTRAINT jobs_refunds_check CHECK (refunds BETWEEN 0 AND 1000000),
    CONSTRAINT jobs_running_leased CHECK (
        state <> 'running' OR (lease_holder IS NOT NULL AND lease_expires_at IS NOT NULL))
)
-- The table churns: vacuum and analyze it long before the cluster's defaults would.
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

ALTER SEQUENCE pgfleet.job_ids OWNED BY pgfleet.jobs.id;

-- The claim reads only waiting rows, in claim order; finished history never enters it.
CREATE INDEX jobs_claim_idx ON pgfleet.jobs (queue, priority, run_at, id)
    WHERE state = 'queued';
-- The claim of a queue with key_concurrency: waiting rows of each key, in claim order...
CREATE INDEX jobs_queued_key_idx ON pgfleet.jobs (queue, concurrency_key, priority, run_at, id)
    WHERE state = 'queued' AND concurrency_key IS NOT NULL;
-- ...and how many of each key run now.
CREATE INDEX jobs_running_key_idx ON pgfleet.jobs (queue, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
-- A vanished host's jobs are found by their expired lease.
CREATE INDEX jobs_lease_expiry_idx ON pgfleet.jobs (lease_expires_at)
    WHERE state = 'running';
-- A unique key guards unfinished jobs only: once its job ends, the key is free again.
CREATE UNIQUE INDEX jobs_unique_key_idx ON pgfleet.jobs (task, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running');
-- Pruning walks finished jobs oldest first.
CREATE INDEX jobs_finished_idx ON pgfleet.jobs (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');
-- Dead-letter counts per queue, without touching succeeded history.
CREATE INDEX jobs_dead_idx ON pgfleet.jobs (queue)
    WHERE state = 'dead';
-- The UI's lists of jobs that ended badly, newest first, all queues or one.
CREATE INDEX jobs_ended_badly_idx ON pgfleet.jobs (state, id)
    WHERE state IN ('dead', 'cancelled');
CREATE INDEX jobs_ended_badly_queue_idx ON pgfleet.jobs (state, queue, id)
    WHERE state IN ('dead', 'cancelled');


-- Where each priority's waiting rows of a queue begin, for the claims: no waiting row of
-- (queue, priority) has a claim key below (run_at, id), so a claim starts there instead of
-- at the head of jobs_claim_idx, past the entries of every job claimed before. Those entries
-- stay while any snapshot might still see their rows (a long transaction elsewhere holds the
-- xmin horizon), and a claim from the head would step over all of them.
-- Writers of waiting rows lower a head below their keys (functions/jobs_heads_*.sql);
-- maintenance moves heads forward (functions/move_heads.sql), over dead entries only.
-- passed_*: where the last move started, rechecked by the next for rows committed late.
CREATE TABLE pgfleet.queue_heads (
    queue         text NOT NULL,
    priority      integer NOT NULL,
    run_at        timestamptz NOT NULL,
    id            bigint NOT NULL,
    passed_run_at timestamptz,
    passed_id     bigint,
    PRIMARY KEY (queue, priority)
);

-- Queues, their limits and the defaults an enqueue gets --------------------------------

-- A queue's pause flag; a queue without a row runs.
CREATE TABLE pgfleet.queues (
    name       text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    paused     boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A queue's flow-control limits, published by its workers from the config. NULL: no limit.
CREATE TABLE pgfleet.queue_limits (
    queue              text PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
    global_concurrency integer CHECK (global_concurrency BETWEEN 1 AND 100000),
    rate_limit         integer CHECK (rate_limit BETWEEN 1 AND 1000000),
    -- Seconds.
    rate_period        double precision CHECK (rate_period > 0 AND rate_period <= 86400),
    key_concurrency    integer CHECK (key_concurrency BETWEEN 1 AND 100000),
    published_by       text,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_limits_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL))
);

-- Starts of a rate-limited queue, one row per claim, read back over one rate period.
CREATE TABLE pgfleet.queue_starts (
    queue text NOT NULL,
    at    timestamptz NOT NULL,
    jobs  integer NOT NULL CHECK (jobs > 0)
);
CREATE INDEX queue_starts_idx ON pgfleet.queue_starts (queue, at);

-- The enqueue defaults of each configured queue and each registered task. An enqueue takes
-- each field from the call, then the task, then its queue, then 'default' and 20.
CREATE TABLE pgfleet.queue_defaults (
    queue        text PRIMARY KEY,
    max_attempts integer CHECK (max_attempts BETWEEN 1 AND 1000),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE pgfleet.task_defaults (
    task         text PRIMARY KEY,
    queue        text,
    max_attempts integer CHECK (max_attempts BETWEEN 1 AND 1000),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- How a crashed attempt's retry is delayed (the task's backoff).
    backoff      jsonb
);


-- Processes and schedules ---------------------------------------------------------------

-- Every supervisor and child registers here and heartbeats.
CREATE TABLE pgfleet.processes (
    id            text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    kind          text NOT NULL
                  CHECK (kind IN ('supervisor', 'worker', 'scheduler', 'maintenance', 'exporter')),
    queue         text,
    supervisor    text,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    -- The queues a supervisor gave up on, with why.
    failed_queues jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX processes_heartbeat_idx ON pgfleet.processes (heartbeat_at);

-- One row per cron fire: its primary key makes each fire enqueue once across every host.
CREATE TABLE pgfleet.schedule_runs (
    schedule   text NOT NULL,
    fire_time  timestamptz NOT NULL,
    job_id     bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, fire_time)
);
CREATE INDEX schedule_runs_latest_idx ON pgfleet.schedule_runs (schedule, fire_time DESC);

-- The schedules every scheduler fires: a config schedule's published definition (the
-- newest config's, chosen by pgfleet.publish_schedules) or a schedule added at runtime.
-- definition holds cron, timezone, task, args, queue, priority, enabled and max_delay.
CREATE TABLE pgfleet.schedules (
    name         text PRIMARY KEY,
    source       text NOT NULL CHECK (source IN ('config', 'runtime')),
    definition   jsonb NOT NULL CHECK (jsonb_typeof(definition) = 'object'),
    paused       boolean NOT NULL DEFAULT false,
    published_at timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- What each running scheduler's config says about each of its schedules. first_published_at
-- is when any scheduler first published that definition: the newest one among live
-- schedulers wins, so a host restarted with an older config does not take a name back.
CREATE TABLE pgfleet.schedule_holders (
    holder             text NOT NULL,
    host               text NOT NULL,
    name               text NOT NULL,
    definition         jsonb NOT NULL,
    first_published_at timestamptz NOT NULL,
    seen_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (holder, name)
);
CREATE INDEX schedule_holders_name_idx ON pgfleet.schedule_holders (name, seen_at);


-- The database the fleet works on ---------------------------------------------------------

-- The server as the claims last saw it: its system identifier and WAL timeline. A failover
-- (a promoted replica) or a restore changes one of them, and the new database may lack
-- claims the old one made while those runs go on. The claims then wait until every lease
-- granted before has expired (functions/epoch_check.sql). NULL: not seen yet.
CREATE TABLE pgfleet.epoch (
    one              boolean PRIMARY KEY DEFAULT true CHECK (one),
    system_id        bigint,
    timeline         integer,
    -- When the claims noticed the change, and when they resume.
    changed_at       timestamptz,
    claims_resume_at timestamptz,
    -- The longest lease any claim asked for, in seconds: how long a run the old database
    -- knew of may go on.
    longest_lease    float8 NOT NULL DEFAULT 0
);
INSERT INTO pgfleet.epoch DEFAULT VALUES;


-- Triggers ------------------------------------------------------------------------------
-- The loader creates what follows once every function of functions/ exists.

-- Refusals: a row out of bounds never reaches the table, whoever writes it. The WHEN
-- clauses let a row in bounds pass without calling any function.
CREATE TRIGGER jobs_args_limits
    BEFORE INSERT OR UPDATE OF args ON pgfleet.jobs FOR EACH ROW
    WHEN (pg_catalog.jsonb_typeof(NEW.args) <> 'object'
          OR pg_catalog.octet_length(NEW.args::text) > 1048576
          OR ((pg_catalog.pg_column_size(NEW.args) >= 512
               OR pg_catalog.pg_column_compression(NEW.args) IS NOT NULL)
              AND pg_catalog.jsonb_path_exists(NEW.args, 'strict $.**{65}')))
    EXECUTE FUNCTION pgfleet.jobs_args_refused();
CREATE TRIGGER jobs_meta_limits
    BEFORE INSERT OR UPDATE OF meta ON pgfleet.jobs FOR EACH ROW
    WHEN (NEW.meta <> '{}'::jsonb
          AND (pg_catalog.jsonb_typeof(NEW.meta) <> 'object'
               OR pg_catalog.octet_length(NEW.meta::text) > 65536
               OR pg_catalog.jsonb_path_exists(NEW.meta, 'strict $.**{17}')))
    EXECUTE FUNCTION pgfleet.jobs_fields_refused();
CREATE TRIGGER jobs_names_limits
    BEFORE INSERT OR UPDATE OF task, queue, unique_key, concurrency_key ON pgfleet.jobs
    FOR EACH ROW
    WHEN (NEW.task = '' OR (pg_catalog.ascii(NEW.task) = 32 AND pg_catalog.btrim(NEW.task) = '')
          OR NEW.queue = ''
          OR (pg_catalog.ascii(NEW.queue) = 32 AND pg_catalog.btrim(NEW.queue) = '')
          OR (pg_catalog.octet_length(NEW.task) > 255 AND pg_catalog.length(NEW.task) > 255)
          OR (pg_catalog.octet_length(NEW.queue) > 128 AND pg_catalog.length(NEW.queue) > 128)
          OR (pg_catalog.octet_length(NEW.unique_key) > 255
              AND pg_catalog.length(NEW.unique_key) > 255)
          OR (pg_catalog.octet_length(NEW.concurrency_key) > 255
              AND pg_catalog.length(NEW.concurrency_key) > 255)
          OR NEW.task || NEW.queue || coalesce(NEW.unique_key, '')
             || coalesce(NEW.concurrency_key, '') ~ '[\x01-\x1f\x7f-\x9f]')
    EXECUTE FUNCTION pgfleet.jobs_fields_refused();
CREATE TRIGGER jobs_run_at_limits
    BEFORE INSERT OR UPDATE OF run_at ON pgfleet.jobs FOR EACH ROW
    WHEN (NOT (NEW.run_at >= '1970-01-01 00:00:00+00' AND NEW.run_at < '3000-01-01 00:00:00+00'))
    EXECUTE FUNCTION pgfleet.jobs_fields_refused();

-- Every waiting row is at or past its queue and priority's head: new rows lower it...
CREATE TRIGGER jobs_heads_inserted
    AFTER INSERT ON pgfleet.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.jobs_heads_inserted();
-- ...and so do rows that wait again (a retry, a give-back, a rescue).
CREATE TRIGGER jobs_heads_requeued
    AFTER UPDATE OF state ON pgfleet.jobs FOR EACH ROW
    WHEN (NEW.state = 'queued' AND OLD.state <> 'queued')
    EXECUTE FUNCTION pgfleet.jobs_heads_requeued();
-- One NOTIFY per queue per inserting statement wakes that queue's workers.
CREATE TRIGGER jobs_notify
    AFTER INSERT ON pgfleet.jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.notify_jobs();

-- State changes. Each trigger below fires on UPDATE OF state; docs/states.md names them.
-- A job whose cancel was asked ends cancelled, not queued or dead: this one rewrites the
-- new state.
CREATE TRIGGER jobs_cancel_requested
    BEFORE UPDATE OF state ON pgfleet.jobs FOR EACH ROW
    WHEN (OLD.cancel_requested_at IS NOT NULL AND NEW.state <> OLD.state)
    EXECUTE FUNCTION pgfleet.jobs_cancel_requested();
-- solo ends with the job.
CREATE TRIGGER jobs_solo_ended
    BEFORE UPDATE OF state ON pgfleet.jobs FOR EACH ROW
    WHEN (NEW.solo AND NEW.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION pgfleet.jobs_solo_ended();
-- A success clears the last attempt's error.
CREATE TRIGGER jobs_success_clears_error
    BEFORE UPDATE OF state ON pgfleet.jobs FOR EACH ROW
    WHEN (NEW.state = 'succeeded' AND NEW.last_error IS NOT NULL)
    EXECUTE FUNCTION pgfleet.jobs_success_clears_error();
-- The end of a job someone waits for is sent on pgfleet_job_end.
CREATE TRIGGER jobs_end_notify
    AFTER UPDATE OF state ON pgfleet.jobs FOR EACH ROW
    WHEN (NEW.result_waited AND NEW.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION pgfleet.jobs_end_notify();
