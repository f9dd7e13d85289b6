-- Limits at claim time and queue pause/resume (docs/concepts.md, "Limits and pause").
-- A queue with no row here is unlimited and unpaused: its producers keep the plain claim
-- (sql/queue/claim.sql checks only that no row exists). A row is deleted again once nothing
-- in it is set (skiplock._queue_tidy), so "has a row" means "is controlled".
CREATE TABLE skiplock.queues (
    queue           text PRIMARY KEY CHECK (queue <> '' AND length(queue) <= 200),
    paused          boolean NOT NULL DEFAULT false,
    -- At most this many running jobs of the queue, all workers together (NULL: no limit).
    concurrency     integer CHECK (concurrency >= 0),
    -- Per limit_key: at most this many running jobs (NULL: no limit).
    key_concurrency integer CHECK (key_concurrency >= 1),
    -- Per limit_key: at most key_rate starts per key_period (both set or both NULL).
    key_rate        integer CHECK (key_rate >= 1),
    key_period      interval CHECK (key_period > interval '0'),
    updated_at      timestamptz NOT NULL DEFAULT now() CHECK (skiplock._time_ok(updated_at)),
    CHECK ((key_rate IS NULL) = (key_period IS NULL))
);

-- The key a job's per-key limits count it under (for example a host); NULL: not key-limited.
ALTER TABLE skiplock.jobs ADD COLUMN limit_key text CHECK (octet_length(limit_key) <= 1000);

-- Counting running jobs of a queue (and of one key) at claim time.
CREATE INDEX jobs_running_key_idx ON skiplock.jobs (queue, limit_key) WHERE state = 'running';

-- The per-key rate state (GCRA): the theoretical arrival time of the key's next start.
-- A start is allowed once now() >= tat - (period - period / rate); it moves tat on by
-- period / rate. Rows whose tat has passed carry no information and may be deleted.
CREATE TABLE skiplock.key_rates (
    queue     text NOT NULL,
    limit_key text NOT NULL,
    tat       timestamptz NOT NULL CHECK (skiplock._time_ok(tat)),
    PRIMARY KEY (queue, limit_key)
);
