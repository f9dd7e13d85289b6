-- Lanes: the (queue, priority) pairs jobs have been enqueued with. The claim
-- (skiplock._claim, sql/api/10_core.sql) reads each lane of its queue from where the worker's
-- earlier claims left it rather than from the head of jobs_claim_idx, whose entries for the
-- jobs claimed since the vacuum horizon was pinned vacuum cannot remove (docs/internals.md,
-- "Claims when Postgres cannot vacuum"). Rows are only inserted, never updated or deleted: a
-- table every claim reads must not grow dead rows of its own while the horizon is held.
CREATE TABLE skiplock.lanes (
    queue    text NOT NULL CHECK (queue <> '' AND length(queue) <= 200),
    priority smallint NOT NULL,
    PRIMARY KEY (queue, priority)
);

-- Every lane an existing job is in (finished jobs too: skiplock.retry may bring one back).
INSERT INTO skiplock.lanes (queue, priority)
SELECT DISTINCT j.queue, j.priority FROM skiplock.jobs j
ON CONFLICT DO NOTHING;
