-- Unfinished jobs that may be past the reaper's maximum age ($1 seconds), at most $2, locked
-- so no worker claims one while the reaper decides (claims use SKIP LOCKED, so they skip these).
-- The same rule as `reaper::is_too_old` (which makes the final decision): a running job is
-- judged by attempted_at, any other by scheduled_at, falling back to the other, then created_at;
-- a job scheduled in the future is never too old.
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
FOR UPDATE SKIP LOCKED
