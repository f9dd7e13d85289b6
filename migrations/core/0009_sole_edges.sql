-- Flows (docs/internals.md, "Flows"): an edge that is its dependent's only dependency is
-- marked `sole` when it is written (a chain's links, a fan-out's children). Such a dependent
-- needs no count: when its one edge resolves with the dependency completed, the statement
-- that resolved it releases it, without reading or writing skiplock.job_waits
-- (skiplock._settle_edges). Edges written before this migration are not sole and are
-- settled as before.
ALTER TABLE skiplock.job_dependencies ADD COLUMN sole boolean NOT NULL DEFAULT false;
