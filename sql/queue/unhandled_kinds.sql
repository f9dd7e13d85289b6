-- Kinds of available jobs no live worker (heartbeat within $1 seconds) has a handler for, with
-- how many wait and how long the oldest has been due; at most $2 kinds (NULL: all). Read by
-- `skiplock stats` and `skiplock doctor`.
SELECT j.kind, count(*) AS count,
       coalesce(extract(epoch FROM now() - min(j.scheduled_at)), 0)::float8 AS oldest_seconds
FROM skiplock.jobs j
WHERE j.state = 'available'
  AND NOT EXISTS (
      SELECT 1 FROM skiplock.workers w
      WHERE j.kind = ANY(w.kinds)
        AND w.heartbeat_at > now() - make_interval(secs => $1))
GROUP BY j.kind
ORDER BY j.kind
LIMIT $2
