-- Claim up to $3 due jobs of the given kinds from queue $1 for worker $4.
-- The CTE is a fence: the planner cannot lock more rows than the LIMIT (Oban's note), and
-- SKIP LOCKED lets many workers claim side by side without waiting on each other.
WITH picked AS (
    SELECT id
    FROM skiplock.jobs
    WHERE state = 'available'
      AND queue = $1
      AND scheduled_at <= now()
      AND kind = ANY($2::text[])
    ORDER BY priority, scheduled_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE skiplock.jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    attempted_at = now(),
    attempted_by = $4,
    heartbeat_at = now()
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
          j.scheduled_at, j.created_at, j.attempted_at
