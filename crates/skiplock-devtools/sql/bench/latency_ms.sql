-- Enqueue-to-start of the latency run's jobs, in ms, both ends on the database clock.
SELECT extract(epoch FROM (attempted_at - created_at))::float8 * 1000
FROM skiplock.jobs WHERE id = ANY($1)
