-- Cron bookkeeping: one row per (schedule, fire time). Inserting the row and the job in
-- one transaction, with this primary key as the arbiter, makes every host's scheduler
-- safe to run at once: the second insert of a fire time does nothing.

CREATE TABLE pgfleet.schedule_runs (
    schedule   text NOT NULL,
    fire_time  timestamptz NOT NULL,
    job_id     bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, fire_time)
);

CREATE INDEX schedule_runs_latest_idx ON pgfleet.schedule_runs (schedule, fire_time DESC);
