-- The board's Retry button: error | in_review -> queued with reason $2 (skiplock.retry_packet);
-- returns the new process-packet job.
SELECT skiplock.retry_packet($1, $2, $3)
