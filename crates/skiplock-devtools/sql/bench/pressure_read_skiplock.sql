-- A reader's scan of the queue's table, inside its long REPEATABLE READ transaction.
SELECT count(*) FROM skiplock.jobs
