-- Kinds of available jobs no live worker (heartbeat within $1 seconds) has a handler for, with
-- how many wait and how long the oldest has been due; at most $2 kinds (NULL: all). Read by
-- `skiplock stats` and `skiplock doctor`. Epochs subtracted rather than timestamps: a job
-- may be due at '-infinity' (crates/skiplock-cli/tests/hardening_sql.rs), which `now() - t`
-- refuses; such a job counts as due for 10^12 s.
SELECT j.kind, count(*) AS count,
       coalesce(least(extract(epoch FROM now()) - extract(epoch FROM min(j.scheduled_at)), 1e12),
                0)::float8 AS oldest_seconds
FROM skiplock.jobs j
WHERE j.state = 'available'
  AND NOT EXISTS (
      SELECT 1 FROM skiplock.workers w
      WHERE j.kind = ANY(w.kinds)
        AND w.heartbeat_at > now() - make_interval(secs => $1))
GROUP BY j.kind
ORDER BY j.kind
LIMIT $2
