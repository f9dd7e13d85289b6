-- Records one step of a running attempt (skiplock._record_step, sql/api/16_steps.sql, says how
-- it is fenced): its seq, NULL when the attempt was taken away.
SELECT skiplock._record_step($1, $2, $3, $4, $5, $6, $7)
