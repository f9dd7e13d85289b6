-- Cancel an available or running job $1 (skiplock.cancel refuses anything else); returns the
-- job's new state.
SELECT skiplock.cancel($1)
