-- Worker $1 no longer waits for jobs in queue $2 (its claims come back full, or it stopped
-- serving the queue): inserts there stop sending NOTIFYs on its account.
DELETE FROM skiplock.waiting WHERE worker = $1 AND queue = $2
