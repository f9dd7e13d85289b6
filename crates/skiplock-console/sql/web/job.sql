-- One job, every column (the job page).
SELECT id, kind, queue, args, state::text AS state, priority, attempt, max_attempts,
       scheduled_at, created_at, attempted_at, attempted_by, heartbeat_at, finalized_at,
       unique_key, errors, result, tags, meta
FROM skiplock.jobs
WHERE id = $1
