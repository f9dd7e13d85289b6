-- Like reap_candidates.sql, without locking: what `skiplock reap --dry-run` lists.
SELECT now() AS db_now, id, kind, queue, args, state::text AS state, attempt,
       scheduled_at, created_at, attempted_at, attempted_by, heartbeat_at
FROM skiplock.jobs
WHERE state IN ('available', 'running')
  AND scheduled_at <= now()
  AND CASE WHEN state = 'running' THEN coalesce(attempted_at, scheduled_at, created_at)
           ELSE coalesce(scheduled_at, attempted_at, created_at) END
      < now() - make_interval(secs => $1)
ORDER BY id
LIMIT $2
