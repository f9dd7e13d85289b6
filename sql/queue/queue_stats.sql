-- Counts per queue and state, plus available jobs whose kind no live worker handles.
SELECT s.queue, s.state, s.count, s.oldest_scheduled_at
FROM skiplock.queue_stats s
ORDER BY s.queue, s.state
