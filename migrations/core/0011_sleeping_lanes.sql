-- Lanes that sleep (docs/internals.md, "Claims when Postgres cannot vacuum"): a lane's row says
-- from when its jobs may be due (`due_at`; NULL: now, the lane is awake), so a claim reads the
-- awake lanes and those whose time has come, never a lane whose jobs are all due later
-- (skiplock._claim_lanes), however many such lanes a queue has. Likewise the limit keys of a
-- fair queue (skiplock.key_lanes, skiplock._fair_pick).
--
-- A row is written by the statement that makes a job available when no row of its lane can be
-- relied on (skiplock._lanes_need): a new row of its own, never an update of another's, so an
-- enqueue never waits for another transaction (the lanes' primary key made a second enqueue
-- into a new priority wait for the first one's commit). A lane may then have several rows;
-- the maintenance merges them, puts to sleep lanes with nothing due and removes lanes with no
-- job (skiplock._lanes_mark, _lanes_settle), in two steps: it marks the rows it means to
-- change (`pending`: no enqueue relies on a pending row), waits for every transaction that
-- was writing jobs when the marks committed to end, then decides again on what it then sees.
-- Rows change at most once or twice per lane per maintenance pass: a table every claim reads
-- must not grow dead rows while Postgres cannot vacuum.
ALTER TABLE skiplock.lanes DROP CONSTRAINT lanes_pkey;
ALTER TABLE skiplock.lanes
    ADD COLUMN due_at timestamptz CONSTRAINT lanes_due_at_range CHECK (skiplock._time_ok(due_at)),
    ADD COLUMN pending boolean NOT NULL DEFAULT false;
-- A lane's rows (the enqueue's question: is there one to rely on?).
CREATE INDEX lanes_lane_idx ON skiplock.lanes (queue, priority);
-- The claim's: a queue's awake lanes in priority order, its sleeping ones by when they wake.
CREATE INDEX lanes_awake_idx ON skiplock.lanes (queue, priority) WHERE due_at IS NULL;
CREATE INDEX lanes_asleep_idx ON skiplock.lanes (queue, due_at) WHERE due_at IS NOT NULL;

-- The limit keys with available jobs of each fair queue (skiplock.set_queue_fairness), as
-- lanes are for priorities: the fair pick walks the awake keys in key order, and a key whose
-- jobs are all due later costs a claim nothing.
CREATE TABLE skiplock.key_lanes (
    queue     text NOT NULL CHECK (queue <> '' AND length(queue) <= 200),
    limit_key text NOT NULL CHECK (limit_key <> '' AND octet_length(limit_key) <= 1000),
    due_at    timestamptz CONSTRAINT key_lanes_due_at_range CHECK (skiplock._time_ok(due_at)),
    pending   boolean NOT NULL DEFAULT false
);
CREATE INDEX key_lanes_key_idx ON skiplock.key_lanes (queue, limit_key);
CREATE INDEX key_lanes_awake_idx ON skiplock.key_lanes (queue, limit_key) WHERE due_at IS NULL;
CREATE INDEX key_lanes_asleep_idx ON skiplock.key_lanes (queue, due_at) WHERE due_at IS NOT NULL;

-- The keys of the fair queues there are now.
INSERT INTO skiplock.key_lanes (queue, limit_key)
SELECT DISTINCT j.queue, j.limit_key FROM skiplock.jobs j
JOIN skiplock.queues c ON c.queue = j.queue AND c.fair
WHERE j.state = 'available' AND j.limit_key IS NOT NULL;

