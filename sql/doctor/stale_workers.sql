-- Worker rows whose last heartbeat is older than $1 seconds (the rescue window): a worker that
-- stopped without removing its row, or one that cannot reach the database.
SELECT id, host, pid, extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_seconds
FROM skiplock.workers
WHERE heartbeat_at < now() - make_interval(secs => $1)
ORDER BY heartbeat_at
LIMIT $2
