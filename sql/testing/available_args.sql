-- The args (as text) of the waiting jobs of kind $1, oldest first (skiplock::testing::enqueued).
SELECT j.args::text FROM skiplock.jobs j
WHERE j.kind = $1 AND j.state = 'available'
ORDER BY j.id
