-- The jobs that wait for job $1, with their states.
SELECT id, kind, state FROM skiplock.dependents($1)
