-- Completions by primary key. The holder index served completions, lease
-- renewal and the claim's count of what a worker held; each lookup walked every entry a
-- worker had ever left under its holder id (the row moves out of the partial index when it
-- finishes; the entry stays until vacuum, and one key's entries cannot be skipped): up to
-- ~39,000 entries read per completion in a drain of 100,000 jobs. Completions, renewal,
-- rescue of a known holder and the task fence now find rows by id; the worker tells the
-- claim what it holds; the rare lookups by holder alone (rescue of a dead worker, a
-- shutdown's give-back of everything) read the running rows through
-- jobs_lease_expiry_idx. One index insertion fewer per claimed job.
DROP INDEX IF EXISTS pgfleet.jobs_lease_holder_idx;
