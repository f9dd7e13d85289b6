-- Push the pack timer of host $1 forward by $2 seconds of quiet, capped at $3 seconds after
-- the window's first reset (see skiplock.pack_arm). Returns the timer's id and fire time.
-- The CTE runs the (volatile) function exactly once.
WITH t AS (
    SELECT skiplock.pack_arm($1, make_interval(secs => $2), make_interval(secs => $3)) AS id
)
SELECT j.id, j.scheduled_at
FROM t JOIN skiplock.jobs j ON j.id = t.id
