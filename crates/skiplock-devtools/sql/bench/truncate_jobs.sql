-- Empties the queue (and the flows' rows, which name its jobs) between measurements.
TRUNCATE skiplock.jobs, skiplock.job_dependencies, skiplock.job_waits, skiplock.flow_jobs, skiplock.job_watches
