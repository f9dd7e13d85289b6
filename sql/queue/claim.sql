-- Claim up to $3 due jobs of the given kinds from queue $1 for worker $4.
-- The CTE is a fence: the planner cannot lock more rows than the LIMIT (Oban's note), and
-- SKIP LOCKED lets many workers claim side by side without waiting on each other.
-- A queue with a row in skiplock.queues (limited or paused) is claimed only through
-- skiplock._claim_limited (sql/queue/claim_limited.sql); the check is one uncorrelated probe
-- of that small table's primary key, evaluated once per statement.
-- The update finds each locked row by its ctid (a TID scan) rather than through the primary
-- key (about 4 % of a claim of 200; README Performance, lever 18): once locked by this
-- statement its version cannot move. A row updated by another transaction between the scan
-- and the lock is missed, never claimed twice; the claim then comes back short, and the
-- producer registers as waiting and claims once more (worker/producer.rs).
WITH picked AS (
    SELECT ctid
    FROM skiplock.jobs
    WHERE state = 'available'
      AND queue = $1
      AND scheduled_at <= now()
      AND kind = ANY($2::text[])
      AND NOT EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = $1)
    ORDER BY priority, scheduled_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
-- A row whose attempt counter is at its maximum (2147483647: only a trusted role can write
-- one) cannot count another attempt: it is discarded here with the reason in its errors and
-- left out of the answer, so it fails alone rather than making every claim of its queue fail
-- on `integer out of range` (tests/queue.rs).
claimed AS (
    UPDATE skiplock.jobs j
    SET state = CASE WHEN j.attempt < 2147483647 THEN 'running'
                     ELSE 'discarded' END::skiplock.job_state,
        attempt = least(j.attempt, 2147483646) + 1,
        attempted_at = now(),
        attempted_by = $4,
        heartbeat_at = now(),
        finalized_at = CASE WHEN j.attempt < 2147483647 THEN j.finalized_at ELSE now() END,
        errors = CASE WHEN j.attempt < 2147483647 THEN j.errors
                      ELSE j.errors || jsonb_build_array(jsonb_build_object(
                          'attempt', j.attempt, 'at', now(),
                          'error', 'discarded at claim: its attempt counter is at its maximum (2147483647) and cannot count another attempt'))
                 END
    FROM picked
    WHERE j.ctid = picked.ctid
    RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
              j.scheduled_at, j.created_at, j.attempted_at, j.state
)
SELECT id, kind, queue, args, priority, attempt, max_attempts, scheduled_at, created_at,
       attempted_at
FROM claimed
WHERE state = 'running'
