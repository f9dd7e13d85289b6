-- The first $2 jobs that wait for job $1 by id, with their states (the job page, `skiplock
-- job`; skiplock.dependency_counts says how many there are).
SELECT id, kind, state FROM skiplock.dependents($1, $2)
