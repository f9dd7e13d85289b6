-- Tags and meta (docs/sql-reference.md, "Tags and meta"): labels an operator filters by
-- (`skiplock jobs --tag`, the console, skiplock.retry_jobs / cancel_jobs) and a JSON object for
-- what is about the job rather than its work (the enqueuer's trace context, a tenant, a
-- request id). Constant defaults: adding them rewrites no row. No index: a filter by tag walks
-- the same rows the state filter does, and a GIN index would cost every enqueue and claim.
ALTER TABLE skiplock.jobs
    ADD COLUMN tags text[] NOT NULL DEFAULT '{}',
    ADD COLUMN meta jsonb NOT NULL DEFAULT '{}';

-- The windows of `unique_for` (skiplock._enqueue_outcome): at most one job of a kind, queue
-- and key is created per window, whatever became of it since. The primary key decides a
-- race of concurrent callers. A row outlives its window only until the maintenance prunes it
-- (skiplock.prune_unique_windows); job_id names the job the window's first enqueue returned
-- (it may since have been deleted by retention).
CREATE TABLE skiplock.unique_windows (
    kind text NOT NULL,
    queue text NOT NULL,
    key text NOT NULL,
    window_start timestamptz NOT NULL,
    window_end timestamptz NOT NULL,
    job_id bigint NOT NULL,
    PRIMARY KEY (kind, queue, key, window_start),
    CHECK (skiplock._time_ok(window_start)),
    CHECK (skiplock._time_ok(window_end))
);
CREATE INDEX unique_windows_end_idx ON skiplock.unique_windows (window_end);

-- Keys held from the handler (`Outcome::SnoozeKey`) or by an operator (skiplock.hold_key)
-- until `until`: skiplock.hold_key moves the key's waiting jobs to `until`, and an enqueue of
-- the key meanwhile is due no earlier; the row is what psql shows of the hold, and retention
-- forgets it once it has passed.
CREATE TABLE skiplock.key_holds (
    queue text NOT NULL,
    limit_key text NOT NULL,
    until timestamptz NOT NULL CHECK (skiplock._time_ok(until)),
    PRIMARY KEY (queue, limit_key)
);

-- Fair mode (skiplock.set_queue_fairness): the queue's claims serve its limit keys
-- round-robin (skiplock._fair_pick) instead of in claim order, from where the previous claim
-- left off (skiplock.key_scans.after_key).
ALTER TABLE skiplock.queues ADD COLUMN fair boolean NOT NULL DEFAULT false;
