-- Push the pack timer of host $1 forward by $2 seconds of quiet, capped at $3 seconds after
-- the window's first reset (see skiplock.pack_arm). Returns the timer's id and fire time.
SELECT j.id, j.scheduled_at
FROM skiplock.jobs j
WHERE j.id = skiplock.pack_arm($1, make_interval(secs => $2), make_interval(secs => $3))
