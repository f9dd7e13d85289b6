-- Push the pack timer of host $1 forward by $2 seconds of quiet, capped at $3 seconds after
-- the window's first reset (see skiplock.pack_arm_at). Returns the timer's id and fire time.
SELECT timer_id, fires_at
FROM skiplock.pack_arm_at($1, make_interval(secs => $2), make_interval(secs => $3))
