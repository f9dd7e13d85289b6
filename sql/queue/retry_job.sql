-- Make job $1 available again, now (skiplock.retry refuses a running job); returns the job's
-- new state.
SELECT skiplock.retry($1)
