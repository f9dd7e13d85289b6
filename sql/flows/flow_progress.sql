-- How many jobs of flow $1 are in each state, and whether the walk from a job that is not a
-- recorded flow stopped at its bound (skiplock.flow_progress).
SELECT total, waiting, available, running, completed, discarded, cancelled, truncated
FROM skiplock.flow_progress($1)
