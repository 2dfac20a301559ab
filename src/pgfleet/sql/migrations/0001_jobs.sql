-- The job table, the claim index, queue pause flags, the SQL enqueue function and the
-- statement-level NOTIFY trigger. Every object lives in the pgfleet schema.

CREATE TYPE pgfleet.job_state AS ENUM ('queued', 'running', 'succeeded', 'dead', 'cancelled');

CREATE TABLE pgfleet.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),
    task             text NOT NULL CHECK (length(task) BETWEEN 1 AND 255),
    args             jsonb NOT NULL DEFAULT '{}'::jsonb,
    state            pgfleet.job_state NOT NULL DEFAULT 'queued',
    -- Lower runs first; bounded so a hostile INSERT cannot starve every other job forever.
    priority         integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    run_at           timestamptz NOT NULL DEFAULT now(),
    attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer NOT NULL DEFAULT 20 CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_holder     text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    last_error       text,
    -- One entry per failed attempt ({attempt, at, error}), each error already truncated.
    errors           jsonb NOT NULL DEFAULT '[]'::jsonb,
    unique_key       text CHECK (length(unique_key) BETWEEN 1 AND 255)
);

-- The claim reads only waiting rows in claim order; finished history never enters it.
CREATE INDEX jobs_claim_idx ON pgfleet.jobs (queue, priority, run_at, id)
    WHERE state = 'queued';

-- Lease renewal, rescue of a dead worker and shutdown give-back look jobs up by holder.
CREATE INDEX jobs_lease_holder_idx ON pgfleet.jobs (lease_holder)
    WHERE state = 'running';

-- A vanished host's jobs are found by an expired lease.
CREATE INDEX jobs_lease_expiry_idx ON pgfleet.jobs (lease_expires_at)
    WHERE state = 'running';

-- A unique key guards only unfinished jobs: once the job ends, the key may be used again.
CREATE UNIQUE INDEX jobs_unique_key_idx ON pgfleet.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running');

-- Pruning walks finished jobs oldest first.
CREATE INDEX jobs_finished_idx ON pgfleet.jobs (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Dead-letter counts per queue for the gauges, without touching succeeded history.
CREATE INDEX jobs_dead_idx ON pgfleet.jobs (queue) WHERE state = 'dead';

-- The jobs table churns: vacuum it sooner than the cluster default.
ALTER TABLE pgfleet.jobs SET (autovacuum_vacuum_scale_factor = 0.02,
                              autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE pgfleet.queues (
    name       text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    paused     boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One notification per queue per statement; PostgreSQL itself folds identical
-- notifications of one transaction into one, so a transaction wakes each queue once.
CREATE FUNCTION pgfleet.notify_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT n.queue FROM new_jobs n WHERE n.state = 'queued' AND n.run_at <= now()
    LOOP
        PERFORM pg_notify('pgfleet_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify AFTER INSERT ON pgfleet.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgfleet.notify_jobs();

-- Enqueue from any language: SELECT pgfleet.enqueue('send_email', '{"to": "a@b"}').
-- With a unique key that an unfinished job already holds, returns that job's id.
CREATE FUNCTION pgfleet.enqueue(
    task         text,
    args         jsonb DEFAULT '{}'::jsonb,
    queue        text DEFAULT 'default',
    priority     integer DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 20,
    unique_key   text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    IF args IS NULL OR jsonb_typeof(args) <> 'object' THEN
        RAISE EXCEPTION 'pgfleet.enqueue: args must be a JSON object, got %',
            coalesce(jsonb_typeof(args), 'null') USING ERRCODE = '22023';
    END IF;
    LOOP
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts, unique_key)
        VALUES (enqueue.queue, enqueue.task, enqueue.args, enqueue.priority,
                coalesce(enqueue.run_at, now()), enqueue.max_attempts, enqueue.unique_key)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'running')
        DO NOTHING
        RETURNING j.id INTO new_id;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        SELECT j.id INTO new_id FROM pgfleet.jobs j
         WHERE j.unique_key = enqueue.unique_key AND j.state IN ('queued', 'running');
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        -- The holder of the key finished between the two statements: insert again.
    END LOOP;
END;
$$;
