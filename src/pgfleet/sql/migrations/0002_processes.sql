-- Liveness: every supervisor and child registers here and heartbeats with the
-- database clock, so hosts with skewed clocks agree on who is stale.

CREATE TABLE pgfleet.processes (
    id           text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('supervisor', 'worker', 'scheduler',
                                               'maintenance', 'exporter')),
    queue        text,
    supervisor   text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX processes_heartbeat_idx ON pgfleet.processes (heartbeat_at);
