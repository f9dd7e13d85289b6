-- Available kinds that no live worker (heartbeat within $1 seconds) has a handler for.
SELECT j.kind, count(*) AS count
FROM skiplock.jobs j
WHERE j.state = 'available'
  AND NOT EXISTS (
      SELECT 1 FROM skiplock.workers w
      WHERE j.kind = ANY(w.kinds)
        AND w.heartbeat_at > now() - make_interval(secs => $1))
GROUP BY j.kind
ORDER BY j.kind
