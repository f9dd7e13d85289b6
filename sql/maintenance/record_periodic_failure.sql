-- Record that period $2 of periodic job $1 could not be enqueued, and why ($3), for
-- `skiplock periodic`; the next successful enqueue clears it (skiplock.enqueue_periodic).
UPDATE skiplock.periodic_jobs
SET last_error = $3, last_error_at = now(), last_error_period = $2
WHERE name = $1
