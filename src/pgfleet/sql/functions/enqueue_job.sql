-- Enqueue and learn whether this call created the job (created = true) or found an
-- unfinished job of the same task holding the unique key (created = false):
--   SELECT * FROM pgfleet.enqueue_job('send_email', '{"to": "a@b"}', unique_key => 'k1');
-- A NULL queue or max_attempts takes the configured default: the task's published one,
-- then its queue's, then 'default' and 20.
CREATE OR REPLACE FUNCTION pgfleet.enqueue_job(
    task            text,
    args            jsonb DEFAULT '{}'::jsonb,
    queue           text DEFAULT NULL,
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT NULL,
    unique_key      text DEFAULT NULL,
    meta            jsonb DEFAULT '{}'::jsonb,
    concurrency_key text DEFAULT NULL,
    OUT job_id      bigint,
    OUT created     boolean
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    task_queue    text;
    task_attempts integer;
    queue_name    text := enqueue_job.queue;
    attempts      integer := enqueue_job.max_attempts;
BEGIN
    IF enqueue_job.args IS NULL OR pg_catalog.jsonb_typeof(enqueue_job.args) <> 'object' THEN
        RAISE EXCEPTION 'pgfleet.enqueue: args must be a JSON object, got %',
            coalesce(pg_catalog.jsonb_typeof(enqueue_job.args), 'null') USING ERRCODE = '22023';
    END IF;
    IF queue_name IS NULL OR attempts IS NULL THEN
        SELECT td.queue, td.max_attempts INTO task_queue, task_attempts
          FROM pgfleet.task_defaults td WHERE td.task = enqueue_job.task;
        queue_name := coalesce(queue_name, task_queue, 'default');
        attempts := coalesce(attempts, task_attempts);
        IF attempts IS NULL THEN
            SELECT qd.max_attempts INTO attempts
              FROM pgfleet.queue_defaults qd WHERE qd.queue = queue_name;
            attempts := coalesce(attempts, 20);
        END IF;
    END IF;
    LOOP
        INSERT INTO pgfleet.jobs AS j (queue, task, args, priority, run_at, max_attempts,
                                       unique_key, meta, concurrency_key)
        VALUES (queue_name, enqueue_job.task, enqueue_job.args, enqueue_job.priority,
                coalesce(enqueue_job.run_at, pg_catalog.now()), attempts,
                enqueue_job.unique_key, coalesce(enqueue_job.meta, '{}'::jsonb),
                enqueue_job.concurrency_key)
        ON CONFLICT (task, unique_key)
           WHERE unique_key IS NOT NULL
             AND state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state)
        DO NOTHING
        RETURNING j.id INTO job_id;
        IF job_id IS NOT NULL THEN
            created := true;
            RETURN;
        END IF;
        SELECT j.id INTO job_id FROM pgfleet.jobs j
         WHERE j.task = enqueue_job.task AND j.unique_key = enqueue_job.unique_key
           AND j.state IN ('queued'::pgfleet.job_state, 'running'::pgfleet.job_state);
        IF job_id IS NOT NULL THEN
            created := false;
            RETURN;
        END IF;
        -- The holder of the key finished between the two statements: insert again.
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pgfleet.enqueue_job(task text, args jsonb, queue text, priority integer, run_at timestamp with time zone, max_attempts integer, unique_key text, meta jsonb, concurrency_key text, OUT job_id bigint, OUT created boolean) FROM PUBLIC;
