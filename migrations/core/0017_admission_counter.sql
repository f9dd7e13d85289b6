-- Admission control without a scan (docs/operations.md, "Admission control"): the insert
-- trigger (skiplock._notify_inserted, sql/api/10_jobs.sql) keeps per limited queue an upper
-- bound of its available jobs, so an enqueue far below the limit adds to it instead of
-- counting the queue through the claim index.
--
-- `admitted`: the queue's available jobs at the last exact count (`counted_at`) plus the jobs
-- enqueues admitted since. Claims, cancels and deletions do not lower it (an over-estimate:
-- it only makes the next enqueue count again); jobs made available again without an insert
-- (a retry, a snooze, a rescue, a released dependency) are not in it until the next count,
-- which an enqueue makes when `counted_at` is more than a second old.
--
-- Both NULL for a row written before this migration or by skiplock.set_queue_admission
-- before its first count: the next enqueue counts exactly, as every enqueue did before.
ALTER TABLE skiplock.queue_admission
    ADD COLUMN admitted bigint,
    ADD COLUMN counted_at timestamptz,
    ADD CONSTRAINT queue_admission_admitted_check CHECK (admitted >= 0),
    ADD CONSTRAINT queue_admission_counted_at_check CHECK (skiplock._time_ok(counted_at));
