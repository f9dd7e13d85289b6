-- A chaos_record handler run: $1 job id, $2 attempt, $3 worker id, $4 process id.
INSERT INTO skiplock_chaos.executions (job_id, attempt, worker_id, pid) VALUES ($1, $2, $3, $4)
