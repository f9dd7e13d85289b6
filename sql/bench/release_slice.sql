-- One slice of the release ceiling (src/bench/flows.rs): the waiting jobs with ids from $1 to
-- $2 made available, due at the statement's clock, and their queues' workers woken, as
-- skiplock._cancel_or_release releases a flow's jobs, with no edge or count to read or write.
WITH released AS (
    UPDATE skiplock.jobs j
    SET state = 'available', scheduled_at = greatest(j.scheduled_at, clock_timestamp())
    WHERE j.id BETWEEN $1 AND $2 AND j.state = 'waiting'
    RETURNING j.queue
)
SELECT count(pg_notify(skiplock._wake_channel(), q.queue))
FROM (SELECT DISTINCT r.queue FROM released r) q
