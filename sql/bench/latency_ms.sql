-- Enqueue-to-start of jobs $1, in milliseconds.
SELECT extract(epoch FROM (attempted_at - created_at))::float8 * 1000 FROM skiplock.jobs WHERE id = ANY($1)
