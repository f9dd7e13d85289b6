-- Is any job of these kinds in these queues claimable now? (--exit-when-idle)
-- $2 is NULL when the worker serves every queue. A paused queue's jobs are not claimable
-- (a limited queue's are: they wait for a slot, not for an operator).
SELECT EXISTS (
    SELECT 1 FROM skiplock.jobs j
    WHERE j.state = 'available' AND j.scheduled_at <= now()
      AND j.kind = ANY($1::text[])
      AND ($2::text[] IS NULL OR j.queue = ANY($2::text[]))
      AND NOT EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = j.queue AND c.paused)
)
