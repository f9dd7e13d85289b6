-- Queues whose per-key rate period is longer than $1 seconds (the reaper's maximum age): their
-- keyed jobs may wait longer than that by design. The reaper leaves such held jobs alone, and
-- warns once per queue and period so that whoever set the maximum age sees the two disagree.
SELECT c.queue, extract(epoch FROM c.key_period)::float8 AS period_s
FROM skiplock.queues c
WHERE c.key_period > make_interval(secs => $1)
ORDER BY c.queue
LIMIT 100
