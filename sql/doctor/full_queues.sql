-- Queues with an admission limit (skiplock.set_queue_admission) and how many jobs wait in
-- each, counted up to the limit + 1 (at most $2 + 1): at the limit, enqueues are refused.
SELECT a.queue, a.max_waiting,
       (SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs j
                              WHERE j.queue = a.queue AND j.state = 'available'
                              LIMIT least(a.max_waiting::int8, $2) + 1) w) AS waiting
FROM skiplock.queue_admission a
ORDER BY a.queue
LIMIT $1
