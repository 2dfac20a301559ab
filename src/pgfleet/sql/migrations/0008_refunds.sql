-- Refunded attempts, counted apart from the attempt number.
--
-- A job given back by a stopping worker (its thread known stopped) used to get its attempt
-- number back; the next run then carried the number of the run before it, so one attempt
-- number ran in two processes, and a task that stopped its own worker (interrupt_main)
-- looped at attempt 0 for ever. Now the attempt number only grows (it is the fence
-- token), and `refunds` says how many attempts did not count: a job may use
-- max_attempts + refunds attempts. Refunds are capped (pgfleet.store.MAX_REFUNDS): past
-- the cap a give-back spends an attempt like any failure.
ALTER TABLE pgfleet.jobs ADD COLUMN refunds integer NOT NULL DEFAULT 0;
