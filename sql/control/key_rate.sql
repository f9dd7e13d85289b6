-- The per-key rate of queue $1 (no row, or NULLs: none).
SELECT key_rate, extract(epoch FROM key_period)::float8 AS key_period_secs
FROM skiplock.queues WHERE queue = $1
