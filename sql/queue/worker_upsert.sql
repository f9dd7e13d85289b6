-- Register or refresh this worker process in skiplock.workers.
INSERT INTO skiplock.workers (id, host, pid, queues, kinds)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = now(), queues = EXCLUDED.queues, kinds = EXCLUDED.kinds
