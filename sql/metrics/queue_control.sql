-- /metrics: the queues with control settings (skiplock.queues, a small table: a queue without
-- a row is neither paused nor limited), their pause flag and limits. The key rate comes as
-- starts per second (key_rate / key_period).
SELECT queue, paused, concurrency, key_concurrency,
       (key_rate / extract(epoch FROM key_period))::float8 AS key_rate_per_second
FROM skiplock.queues
ORDER BY queue
