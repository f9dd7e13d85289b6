-- Periodic jobs whose latest enqueue failed (docs/maintenance.md, "When an enqueue fails").
SELECT name, kind, queue, last_error,
       extract(epoch FROM now() - last_error_at)::float8 AS seconds_ago
FROM skiplock.periodic_jobs
WHERE last_error IS NOT NULL
ORDER BY last_error_at DESC NULLS LAST, name
LIMIT $1
