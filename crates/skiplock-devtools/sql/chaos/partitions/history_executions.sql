-- Every recorded execution, for the history checker.
SELECT id, job_id, attempt, worker_id, pid, started_at, ended_at, outcome
FROM skiplock_faults.executions ORDER BY id
