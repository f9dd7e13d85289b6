-- Overview: worker processes whose heartbeat is newer than $1 seconds, with their uptime and
-- heartbeat age on the database clock (the console's clock may differ).
SELECT id, host, pid, queues, kinds, started_at, heartbeat_at,
       extract(epoch FROM now() - started_at)::float8 AS uptime_secs,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age_secs
FROM skiplock.workers
WHERE heartbeat_at > now() - make_interval(secs => $1)
ORDER BY host, pid, id
