-- Flows against a hostile enqueuer (docs/security.md, "Flows between tenants").
--
-- Two limits of the SQL API (skiplock._limit; the owner may change them): how many dependency
-- edges one call may write, and how many jobs the walk of skiplock.flow_members reaches from a
-- job that is not a recorded flow. A database that already has a row keeps its value.
INSERT INTO skiplock.settings (name, value, about) VALUES
    ('depends_on.max_edges', 100000,
     'most dependency edges one enqueue call may write (its jobs times their depends_on; a flow''s jobs together)'),
    ('flow_members.max_jobs', 10000,
     'most jobs skiplock.flow_members and flow_progress reach from a job that is not a recorded flow (flow_progress says when it stopped there)')
ON CONFLICT (name) DO NOTHING;

-- The channel a watched job's finish is announced on: 'skiplock_finished_' and a random UUID,
-- readable by those who may read the jobs (the owner, the worker and operator roles, and the
-- enqueuer role through skiplock.finished_channel(), as it may wait for any job). The fixed
-- name it had told any login which jobs finished when (docs/security.md). One row, as
-- skiplock.wake_channel; the owner may rotate it with an UPDATE (a waiter reads it when it
-- starts waiting).
CREATE TABLE skiplock.finished_channel (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    channel text NOT NULL CHECK (channel ~ '^skiplock_finished_[0-9a-f]{32}$')
);
INSERT INTO skiplock.finished_channel (channel)
VALUES ('skiplock_finished_' || replace(gen_random_uuid()::text, '-', ''));
