-- How many jobs of flow $1 are in each state (skiplock.flow_progress).
SELECT total, waiting, available, running, completed, discarded, cancelled
FROM skiplock.flow_progress($1)
