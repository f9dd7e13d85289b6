-- Is any job of these kinds in these queues claimable now? (--exit-when-idle)
-- $2 is NULL when the worker serves every queue.
SELECT EXISTS (
    SELECT 1 FROM skiplock.jobs
    WHERE state = 'available' AND scheduled_at <= now()
      AND kind = ANY($1::text[])
      AND ($2::text[] IS NULL OR queue = ANY($2::text[]))
)
