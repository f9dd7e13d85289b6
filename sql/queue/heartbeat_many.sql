-- Refresh heartbeat_at of the (id, attempt) pairs this worker still runs. Ids missing from
-- the result were rescued or cancelled elsewhere: the worker tells their handlers to stop.
UPDATE skiplock.jobs j
SET heartbeat_at = now()
FROM unnest($1::bigint[], $2::integer[]) AS a(id, attempt)
WHERE j.id = a.id
  AND j.state = 'running'
  AND j.attempt = a.attempt
RETURNING j.id
