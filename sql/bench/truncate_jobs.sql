-- Empty the jobs table between benchmark runs.
TRUNCATE skiplock.jobs
