-- Whether queue $1 has limits or is paused (a row in skiplock.queues): a producer that holds
-- jobs claimed ahead lets them go when it is (they would start past the pause or the limit).
SELECT EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = $1)
