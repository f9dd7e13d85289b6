-- Paused queues, how long since their control row last changed, and how many jobs wait in
-- each (counted up to $2).
SELECT q.queue,
       extract(epoch FROM now() - q.updated_at)::float8 AS paused_seconds,
       (SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs j
                              WHERE j.queue = q.queue AND j.state = 'available'
                              LIMIT $2) w) AS waiting
FROM skiplock.queues q
WHERE q.paused
ORDER BY q.updated_at
LIMIT $1
