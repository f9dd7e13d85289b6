-- The state changes (claims, acks) the worker connection from address $1, port $2 committed
-- since $3: a lost-commit fault waits for one, a commit whose answer it then makes sure the
-- worker never reads.
SELECT count(*) FROM skiplock_faults.transitions WHERE changed_by = $1 AND port = $2 AND at >= $3
