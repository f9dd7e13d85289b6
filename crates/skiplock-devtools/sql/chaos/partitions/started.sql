-- A partition run's handler has started: job $1, attempt $2, worker $3, process $4; returns
-- the execution's id (committed on its own, before anything else the handler does).
INSERT INTO skiplock_faults.executions (job_id, attempt, worker_id, pid) VALUES ($1, $2, $3, $4)
RETURNING id
