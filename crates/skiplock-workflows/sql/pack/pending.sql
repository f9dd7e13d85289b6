-- For the do-the-packing job $1 of host $2: the database clock, when the job's window began
-- (its created_at), and the host's pending timer (another available, keyed row), if any.
SELECT now() AS now,
       (SELECT j.created_at FROM skiplock.jobs j WHERE j.id = $1) AS window_start,
       t.id AS pending_id,
       t.scheduled_at AS pending_at
FROM (SELECT 1) AS one
LEFT JOIN skiplock.jobs t
       ON t.unique_key = skiplock.pack_key($2)
      AND t.state = 'available'
      AND t.kind = 'do-the-packing'
      AND t.queue = 'pack'
      AND t.id <> $1
