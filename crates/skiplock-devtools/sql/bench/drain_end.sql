-- After a multi-process drain: how many of the drain's jobs (kind noop, queue default)
-- completed, and when the last of their acks was written (epoch seconds; finalized_at is the
-- ack transaction's start). The workers' own maintenance jobs (another queue) do not count.
SELECT count(*) FILTER (WHERE state = 'completed'),
       extract(epoch FROM max(finalized_at))::float8
FROM skiplock.jobs
WHERE queue = 'default' AND kind = 'noop'
