-- Hold the limit key of job $1 for $2 seconds from the database's clock (skiplock.hold_key,
-- sql/api/17_admin.sql): a handler's `Outcome::SnoozeKey`. No row for a job without a key.
SELECT skiplock.hold_key(j.queue, j.limit_key, now() + make_interval(secs => $2))
FROM skiplock.jobs j
WHERE j.id = $1 AND j.limit_key IS NOT NULL
