-- Bounds on a job's counters. A row written straight into the
-- table with attempt = 2147483647 made every claim that reached it fail on attempt + 1
-- ("integer out of range"): the queue's workers crashed until the queue was marked failed,
-- and the completions riding with those claims were rolled back, so finished jobs ran
-- again. crashes = 2147483647 did the same to the supervisor's rescue (crashes + 1), which
-- then gave back no dead worker's jobs until their leases expired. No real job comes near
-- these bounds: max_attempts is at most 1000, refunds are capped at 3 give-backs, and
-- snoozes at 100. The claims (0018, 0020) and the rescue (queries.sql) saturate at the
-- bound instead of stepping past it, so a row at the bound is claimed and rescued like any
-- other (its fence still holds: the holder changes). Rows already out of bounds are
-- brought inside them first.

UPDATE pgfleet.jobs
   SET attempt = least(attempt, 1000000), crashes = least(crashes, 1000000),
       refunds = least(greatest(refunds, 0), 1000000)
 WHERE attempt > 1000000 OR crashes > 1000000 OR refunds > 1000000 OR refunds < 0;

ALTER TABLE pgfleet.jobs
    ADD CONSTRAINT jobs_attempt_bound CHECK (attempt <= 1000000),
    ADD CONSTRAINT jobs_crashes_bound CHECK (crashes <= 1000000),
    ADD CONSTRAINT jobs_refunds_check CHECK (refunds >= 0 AND refunds <= 1000000);
