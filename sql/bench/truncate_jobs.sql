-- Empties the queue between measurements.
TRUNCATE skiplock.jobs
