-- After a waiting attempt's ack: makes the job due if its signal came meanwhile
-- (skiplock._wake_signalled, sql/api/16_steps.sql): 'running', 'woken' or 'done'.
SELECT skiplock._wake_signalled($1, $2, $3, $4)
