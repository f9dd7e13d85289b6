-- How many dependencies job $1 has and how many jobs wait for it, each counted up to $2.
SELECT dependencies, dependents FROM skiplock.dependency_counts($1, $2)
