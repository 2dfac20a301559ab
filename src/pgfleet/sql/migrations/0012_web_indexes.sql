-- The web UI's jobs page filtered by a rare state: dead and cancelled jobs, of every queue
-- or of one, newest first, read from an index in id order however long the history is.
-- Partial: only rows that end dead or cancelled enter them, so the claim, completion and
-- succeeded history of the hot path never write to them.
CREATE INDEX jobs_ended_badly_idx ON pgfleet.jobs (state, id)
    WHERE state IN ('dead', 'cancelled');
CREATE INDEX jobs_ended_badly_queue_idx ON pgfleet.jobs (state, queue, id)
    WHERE state IN ('dead', 'cancelled');
