-- The claim of a key-limited queue, set-based and bounded (skiplock._claim_limited in
-- sql/api/15_limits.sql; README, "Limits and pause").
--
-- Per limit_key, its jobs in claim order: the claim reaches each key's first startable jobs
-- directly, and walks the distinct keys of a queue with a loose index scan, so keys that
-- their rate or running count block cost one probe each, however many jobs they hold and
-- wherever the enqueuer put them in the queue's order. Jobs without a limit_key are one
-- range of it (`limit_key IS NULL`), read apart from the keys: a key's limits never hold
-- them back. Only available rows: a claim's new version (`running`) is not in it.
CREATE INDEX jobs_key_claim_idx ON skiplock.jobs (queue, limit_key, priority, scheduled_at, id)
    WHERE state = 'available';

-- Where the next claim of a queue resumes its walk over the keys, when the queue has more keys
-- with available jobs than one claim examines (`claim_limited.max_keys`): after `after_key`,
-- in key order; `wait_until` is the earliest start a key's rate allows among the keys the
-- walk has examined since it last began at the first key (NULL: none seen). No row: the next
-- claim starts at the first key. The claim deletes the row once its walk reaches the last key.
CREATE TABLE skiplock.key_scans (
    queue      text PRIMARY KEY CHECK (queue <> '' AND length(queue) <= 200),
    after_key  text NOT NULL,
    wait_until timestamptz CHECK (skiplock._time_ok(wait_until))
);

INSERT INTO skiplock.settings (name, value, about) VALUES
    ('claim_limited.max_keys', 250,
     'most limit keys one claim of a queue with per-key limits examines (the next claim resumes after the last)')
ON CONFLICT (name) DO NOTHING;
