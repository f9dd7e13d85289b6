-- A wait for a signal (skiplock._wait_step, sql/api/16_steps.sql, says how it is fenced).
SELECT outcome, payload, scope, sent_at, until FROM skiplock._wait_step($1, $2, $3, $4, $5, $6)
