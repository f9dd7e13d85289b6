-- Register worker $1 as waiting for jobs in queue $2 ('': every queue), so inserts into it
-- send a NOTIFY. Idempotent: an existing row is left alone (and nothing is written).
INSERT INTO skiplock.waiting (worker, queue)
VALUES ($1, $2)
ON CONFLICT (queue, worker) DO NOTHING
