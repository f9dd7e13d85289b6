-- The release ceiling (src/bench/flows.rs): every job but the first made to wait, as a
-- fan-out's children wait for their root. Returns the first id and the last.
WITH held AS (
    UPDATE skiplock.jobs SET state = 'waiting'
    WHERE id > (SELECT min(id) FROM skiplock.jobs)
    RETURNING id
)
SELECT (SELECT min(id) FROM skiplock.jobs), (SELECT max(h.id) FROM held h)
