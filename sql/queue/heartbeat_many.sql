-- Refresh heartbeat_at of the (id, attempt) pairs this worker still runs. Ids missing from
-- the result were rescued or cancelled elsewhere: the worker tells their handlers to stop.
UPDATE skiplock.jobs j
SET heartbeat_at = now()
FROM unnest($1::bigint[], $2::integer[]) AS a(id, attempt)
WHERE j.id = a.id
  -- Compared as text on purpose: `state = 'running'` would let the planner drive the join
  -- from the partial index of running rows (estimated near-empty by stale statistics) and
  -- rescan the array for every row, quadratic in the batch. This way the plan is always
  -- array -> primary key, and rows are locked in array order (callers sort by id, so the
  -- heartbeat and ack statements never deadlock each other).
  AND j.state::text = 'running'
  AND j.attempt = a.attempt
RETURNING j.id
