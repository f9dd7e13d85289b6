-- The sweep (skiplock.settle_dependencies): settles up to $1 finished jobs whose dependents
-- were not told (the rescuer's, the reaper's and a claim's discards, a plain UPDATE).
SELECT skiplock.settle_dependencies($1)
