-- The dependencies of job $1, how they finished and what they returned.
SELECT id, name, kind, state, result FROM skiplock.dependency_results($1)
