-- Delete at most $3 jobs in state $1 finalized more than $2 seconds ago, oldest first.
-- Small batches keep each statement's locks short so the claim path is never held up.
WITH doomed AS (
    SELECT id
    FROM skiplock.jobs
    WHERE state = $1
      AND finalized_at < now() - make_interval(secs => $2)
    ORDER BY finalized_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
DELETE FROM skiplock.jobs j USING doomed d WHERE j.id = d.id
