-- Crash containment. A process that dies takes every job it held with
-- it, so a crash is counted apart from attempts: only a job that was alone in its
-- process when it died is charged an attempt. The others are marked `solo` and from then
-- on are claimed only into a worker that holds nothing else, so the next crash names its
-- culprit.

ALTER TABLE pgfleet.jobs
    ADD COLUMN crashes integer NOT NULL DEFAULT 0 CHECK (crashes >= 0),
    ADD COLUMN solo boolean NOT NULL DEFAULT false;
