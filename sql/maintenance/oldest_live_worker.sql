-- When the longest-running live worker started (heartbeat within $1 seconds), and now():
-- `skiplock reap` applies the uptime guard to the worker fleet, not to itself.
SELECT now() AS db_now, min(started_at) AS started_at
FROM skiplock.workers
WHERE heartbeat_at >= now() - make_interval(secs => $1)
