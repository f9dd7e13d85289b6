-- After a multi-process drain: how many jobs completed, and when the last ack was written
-- (epoch seconds; finalized_at is the ack transaction's start).
SELECT count(*) FILTER (WHERE state = 'completed'),
       extract(epoch FROM max(finalized_at))::float8
FROM skiplock.jobs
