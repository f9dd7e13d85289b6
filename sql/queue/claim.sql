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
)
-- `least`: a row whose attempt counter is already at its maximum (2147483647: only a trusted
-- role can write one) keeps it rather than failing every claim of its queue on `integer out
-- of range`; store::claim discards such a row with the reason (sql/queue/discard_overflow.sql)
-- and leaves it out of the answer, so it fails alone (tests/queue.rs). (A job that reaches
-- the maximum by 2,147,483,646 attempts is discarded instead of its last one.) Nothing else in this
-- statement is per row: a CASE per column for that row, or a CTE to filter it here, cost the
-- plain drain 2-5 % of its rate (scripts/bench, same-run pairs).
UPDATE skiplock.jobs j
SET state = 'running',
    attempt = least(j.attempt, 2147483646) + 1,
    attempted_at = now(),
    attempted_by = $4,
    heartbeat_at = now()
FROM picked
WHERE j.ctid = picked.ctid
RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
          j.scheduled_at, j.created_at, j.attempted_at
