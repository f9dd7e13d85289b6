-- Distinct queues holding due jobs of the given kinds ($1), other than those already served
-- ($2), at most $3 of them, in name order after $4 (NULL: from the first): a loose index scan
-- over the partial claim index (fast even with many available rows). The caller rotates $4
-- (src/worker/queues.rs), so queues named to sort first cannot keep the others from ever
-- being found when more have due work than a worker may serve. Queues come from the table,
-- never from a NOTIFY payload. A paused queue is not served (resume_queue wakes workers, and
-- the next discovery finds it).
WITH RECURSIVE q AS (
    (SELECT queue FROM skiplock.jobs
     WHERE state = 'available' AND queue > coalesce($4::text, '')
     ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM skiplock.jobs j
            WHERE j.state = 'available' AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL
)
SELECT q.queue FROM q
WHERE q.queue IS NOT NULL
  AND q.queue <> ALL($2::text[])
  AND NOT EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = q.queue AND c.paused)
  AND EXISTS (SELECT 1 FROM skiplock.jobs j
              WHERE j.state = 'available' AND j.queue = q.queue
                AND j.scheduled_at <= now() AND j.kind = ANY($1::text[]))
LIMIT $3
