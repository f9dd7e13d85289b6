-- Running jobs whose worker is live (heartbeat within $1 seconds, the rescue window: the
-- rescuer leaves them alone) but which started more than $2 seconds ago. The reaper judges a
-- running job by the same start (sql/maintenance/reap_candidates.sql) and discards it once
-- that is older than SKIPLOCK_REAPER_MAX_AGE, heartbeat or not. Longest running first.
SELECT id, kind, queue, attempted_by,
       extract(epoch FROM now() - coalesce(attempted_at, heartbeat_at, scheduled_at, created_at))::float8
           AS running_seconds,
       extract(epoch FROM now() - coalesce(heartbeat_at, attempted_at, created_at))::float8
           AS heartbeat_seconds
FROM skiplock.jobs
WHERE state = 'running'
  AND coalesce(heartbeat_at, attempted_at, created_at) >= now() - make_interval(secs => $1)
  AND coalesce(attempted_at, heartbeat_at, scheduled_at, created_at) < now() - make_interval(secs => $2)
ORDER BY coalesce(attempted_at, heartbeat_at, scheduled_at, created_at), id
LIMIT $3
