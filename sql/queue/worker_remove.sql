-- Forget worker $1 (a clean exit).
DELETE FROM skiplock.workers WHERE id = $1
