-- The first $2 dependencies of job $1 by id, how they finished and what they returned (the job
-- page, `skiplock job`; skiplock.dependency_counts says how many there are).
SELECT id, name, kind, state, result FROM skiplock.dependency_results($1, $2)
