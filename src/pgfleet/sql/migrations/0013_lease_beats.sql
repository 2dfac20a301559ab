-- Lease beats: a counter every lease renewal advances.
--
-- Rescue used to compare lease_expires_at with the server's now(): a forward jump of the
-- server's clock made every live lease look expired, and their jobs ran twice at once.
-- Now a job is rescued only when its (holder, attempt, beats) stayed the same for a whole
-- lease, timed by the rescuer's own monotonic clock (pgfleet.lease_watch): no wall clock
-- of any host decides it. lease_expires_at stays, for people to read.
ALTER TABLE pgfleet.jobs ADD COLUMN beats bigint NOT NULL DEFAULT 0;
