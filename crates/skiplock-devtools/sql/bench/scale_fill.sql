-- Ballast for the scale run: $1 finished rows (finished an hour ago).
INSERT INTO skiplock.jobs (kind, state, attempt, scheduled_at, attempted_at, finalized_at)
SELECT 'noop', 'completed', 1, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, $1);
