-- Sends a signal to a job (skiplock.signal): whether it was kept.
SELECT skiplock.signal($1, $2, $3)
