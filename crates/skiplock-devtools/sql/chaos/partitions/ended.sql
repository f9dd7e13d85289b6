-- A partition run's handler ended execution $1 with outcome $2.
UPDATE skiplock_faults.executions SET ended_at = clock_timestamp(), outcome = $2 WHERE id = $1
