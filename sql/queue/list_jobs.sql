-- Jobs for operators, newest first, filtered by optional state, kind, queue, tag (one of the
-- job's tags) and meta (a JSON object the job's meta contains).
SELECT id, kind, queue, args, state, priority, attempt, max_attempts,
       scheduled_at, created_at, attempted_at, attempted_by, heartbeat_at, finalized_at,
       unique_key, errors, result, tags, meta
FROM skiplock.jobs
WHERE ($1::skiplock.job_state IS NULL OR state = $1)
  AND ($2::text IS NULL OR kind = $2)
  AND ($3::text IS NULL OR queue = $3)
  AND ($5::text IS NULL OR $5 = ANY (tags))
  AND ($6::jsonb IS NULL OR meta @> $6)
ORDER BY id DESC
LIMIT $4
