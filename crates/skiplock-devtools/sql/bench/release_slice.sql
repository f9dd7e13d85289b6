-- One slice of the release ceiling (src/bench/flows.rs): the waiting jobs with ids from $1 to
-- $2 made available, due at the statement's clock, and their queues' workers woken, as
-- skiplock._cancel_or_release releases a flow's jobs, with no edge or count to read or write.
WITH released AS (
    UPDATE skiplock.jobs j
    SET state = 'available', scheduled_at = greatest(j.scheduled_at, clock_timestamp())
    WHERE j.id BETWEEN $1 AND $2 AND j.state = 'waiting'
    RETURNING j.queue, j.priority, j.limit_key, j.scheduled_at
), laned AS (
    -- Their lanes, as a release registers them (skiplock._lanes_need).
    SELECT skiplock._lanes_need(array_agg(r.queue), array_agg(r.priority), array_agg(r.limit_key),
                                array_agg(r.scheduled_at))
    FROM released r
)
SELECT count(pg_notify(skiplock._wake_channel(), q.queue)) + (SELECT count(*) FROM laned)
FROM (SELECT DISTINCT r.queue FROM released r) q
