-- $1 due noop jobs in queue 'default', spread over $2 limit keys ('k0' ... ), for the drains
-- under a per-key limit.
INSERT INTO skiplock.jobs (kind, args, queue, limit_key)
SELECT 'noop', '{}'::jsonb, 'default', 'k' || (i % $2)
FROM generate_series(0, $1 - 1) AS i
