-- Flows (docs/flows.md, docs/internals.md "Flows").
--
-- One row per edge: job `job_id` waits for job `depends_on`. `resolved` is the state the
-- dependency finished in once it counted for the dependent (NULL: not yet), so a dependency
-- counts once however often it is acknowledged, rescued or retried (skiplock._settle). Read
-- by dependency (the ack's probe: one index lookup per finished job, nothing when it has no
-- dependents) and by dependent (dependency_results, the job page).
CREATE TABLE skiplock.job_dependencies (
    job_id bigint NOT NULL,
    depends_on bigint NOT NULL,
    resolved skiplock.job_state,
    PRIMARY KEY (job_id, depends_on),
    CHECK (job_id <> depends_on)
)
-- Every edge is written once more when it resolves: room on its page for that update to stay
-- there (a HOT update, no new index entries), as skiplock.jobs leaves for its own.
WITH (fillfactor = 50);
-- In dependent order within a dependency: a slice of a big fan-out's release resumes after
-- the last dependent the slice before settled (skiplock._settle_slice).
CREATE INDEX job_dependencies_depends_on_idx ON skiplock.job_dependencies (depends_on, job_id);

-- One row per job that has dependencies: how many have still to count (0: the job is, or
-- was, released), what a failed dependency does to it ('cancel' it, transitively, or 'run'
-- it anyway: a finaliser), and which dependency's failure cancelled it (so a retry of that
-- dependency brings it back, and an operator's own cancel is told apart). A fan-in's
-- completions each cost one decrement of this row, never a count of the siblings.
CREATE TABLE skiplock.job_waits (
    job_id bigint PRIMARY KEY,
    pending integer NOT NULL CHECK (pending >= 0),
    on_dependency_failure text NOT NULL DEFAULT 'cancel'
        CHECK (on_dependency_failure IN ('cancel', 'run')),
    cancelled_by bigint
)
-- Counted down once per settling statement: room for the new versions on the same page.
WITH (fillfactor = 50);

-- The members of a flow made by skiplock.enqueue_flow, by their local names: the flow's id is
-- its first job's. skiplock.flow_progress and the console's flow page read it.
CREATE TABLE skiplock.flow_jobs (
    flow_id bigint NOT NULL,
    name text NOT NULL CHECK (name <> '' AND length(name) <= 200),
    job_id bigint NOT NULL,
    PRIMARY KEY (flow_id, name)
);
CREATE INDEX flow_jobs_job_idx ON skiplock.flow_jobs (job_id);

-- Jobs someone waits for (skiplock.watch, `skiplock::wait_for`, `skiplock wait`): the ack of
-- such a job sends a NOTIFY on channel skiplock_finished with its id; a job nobody watches
-- costs the ack one index probe. Rows are removed when the job finishes, or by retention
-- once a watcher stops refreshing them.
CREATE TABLE skiplock.job_watches (
    job_id bigint PRIMARY KEY,
    since timestamptz NOT NULL DEFAULT now() CHECK (skiplock._time_ok(since))
);

-- A keyed job with dependencies holds its key while it waits, as an available one does:
-- the unique index covers both states. Built before the old one is dropped, so the key is
-- never unguarded; ON CONFLICT's arbiter (state = 'available' AND unique_key IS NOT NULL)
-- implies this predicate and still finds it.
CREATE UNIQUE INDEX jobs_unique_pending_kind_queue_idx ON skiplock.jobs (kind, queue, unique_key)
    WHERE state IN ('available', 'waiting') AND unique_key IS NOT NULL;
DROP INDEX skiplock.jobs_unique_available_kind_queue_idx;
