-- One index fewer on the claim path (docs/internals.md).
--
-- A claim moves a row to `running`, a non-HOT update that inserts the new version into every
-- index whose predicate it matches: the primary key, the running index on attempted_by
-- (0009) and the running index on (queue, limit_key) (0008). Their predicates are the same
-- and running rows are few (concurrency × workers), so one of them serves every reader of
-- running rows: the rescuer's scan of all running rows, the per-queue and per-key counts of
-- the limited claim, and release_orphans (a worker's running rows, read at shutdown or after
-- a producer failed: a scan of the running rows, filtered by attempted_by).
DROP INDEX skiplock.jobs_running_idx;
