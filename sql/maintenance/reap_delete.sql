-- Delete the jobs the reaper judged too old (still locked by its transaction).
DELETE FROM skiplock.jobs WHERE id = ANY($1) AND state IN ('available', 'running')
