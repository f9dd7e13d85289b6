-- Unfinished jobs that may be past the reaper's maximum age ($1 seconds). The reaper appends
-- `LIMIT $2 FOR UPDATE SKIP LOCKED` (locked so no worker claims one while it decides; claims
-- use SKIP LOCKED and skip these); `skiplock reap --dry-run` appends `ORDER BY id LIMIT $2`.
-- The same rule as `reaper::is_too_old` (which makes the final decision): a running job is
-- judged by attempted_at, any other by scheduled_at, falling back to the other, then created_at;
-- a job scheduled in the future is never too old.
SELECT now() AS db_now, id, kind, queue, args, state, attempt,
       scheduled_at, created_at, attempted_at, attempted_by, heartbeat_at
FROM skiplock.jobs
-- Written as one branch per state so the planner reads only the two partial indexes of
-- unfinished rows (jobs_claim_idx, jobs_running_key_idx), never the finished bulk of the table.
WHERE ((state = 'available'
        AND coalesce(scheduled_at, attempted_at, created_at) < now() - make_interval(secs => $1))
    OR (state = 'running'
        AND coalesce(attempted_at, scheduled_at, created_at) < now() - make_interval(secs => $1)))
  AND scheduled_at <= now()
