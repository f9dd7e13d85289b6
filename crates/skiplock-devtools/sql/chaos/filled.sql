-- How many of the chaos_record jobs $1..$2 exist (a producer's batch commits whole or not
-- at all; this tells which, after its answer was lost in a failover).
SELECT count(*) FROM skiplock.jobs
WHERE kind = 'chaos_record' AND (args->>'n')::bigint BETWEEN $1 AND $2
