-- A reader's scan of Graphile Worker's job table, inside its long REPEATABLE READ transaction.
SELECT count(*) FROM graphile_worker._private_jobs
