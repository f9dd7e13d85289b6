-- Every queue with control settings or live jobs (skiplock queue list).
SELECT queue, paused, concurrency, key_concurrency, key_rate,
       extract(epoch FROM key_period)::float8 AS key_period_secs, available, running, fair
FROM skiplock.queue_control
ORDER BY queue
