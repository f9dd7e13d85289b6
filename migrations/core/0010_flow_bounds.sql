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
