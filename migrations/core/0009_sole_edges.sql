-- Flows (docs/internals.md, "Flows"): an edge that is its dependent's only dependency is
-- marked `sole` when it is written. Such a dependent needs no count: whether it may run is a
-- function of its one dependency's state, and its own state (`waiting` or not) says whether
-- that has been acted on. So a fan-out's slices release sole dependents without writing
-- their edges (skiplock._settle_edges). Edges written before this migration are not sole and
-- are settled as before.
ALTER TABLE skiplock.job_dependencies ADD COLUMN sole boolean NOT NULL DEFAULT false;

-- The waiting jobs, for the maintenance's sweep (skiplock.settle_dependencies): a sole
-- dependent left waiting after its dependency finished (a worker stopped between two slices
-- of a fan-out) is found from here, not from the edges, which keep every released sole
-- dependent's edge unresolved. Jobs that never wait are never in it.
CREATE INDEX jobs_waiting_idx ON skiplock.jobs (id) WHERE state = 'waiting';
