-- Operator: error | in_review -> queued, with a new job; returns the job id.
SELECT skiplock.retry_packet($1, $2, $3)
