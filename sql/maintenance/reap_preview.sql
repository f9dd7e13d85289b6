-- Like reap_candidates.sql, without locking: what `skiplock reap --dry-run` lists.
SELECT now() AS db_now, id, kind, queue, args, state::text AS state, attempt,
       scheduled_at, created_at, attempted_at, attempted_by, heartbeat_at
FROM skiplock.jobs
-- Written as one branch per state so the planner reads only the two partial indexes of
-- unfinished rows (jobs_claim_idx, jobs_running_idx), never the finished bulk of the table.
WHERE ((state = 'available'
        AND coalesce(scheduled_at, attempted_at, created_at) < now() - make_interval(secs => $1))
    OR (state = 'running'
        AND coalesce(attempted_at, scheduled_at, created_at) < now() - make_interval(secs => $1)))
  AND scheduled_at <= now()
ORDER BY id
LIMIT $2
