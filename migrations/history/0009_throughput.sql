-- Less write per job (docs/performance.md).
--
-- The running index covered heartbeat_at, so every heartbeat of every running job was a
-- non-HOT update: a new heap tuple on any page plus an entry in the primary key and in this
-- index. Indexed by attempted_by instead (which only a claim changes, and a claim changes
-- `state` anyway), a heartbeat touches no indexed column and can be a HOT update. The
-- rescuer (sql/queue/rescue.sql) still reads only running rows through it, and
-- release_orphans finds a worker's rows by attempted_by directly.
DROP INDEX skiplock.jobs_running_idx;
CREATE INDEX jobs_running_idx ON skiplock.jobs (attempted_by) WHERE state = 'running';

-- More room per page: a job is written three times (insert, claim, ack). When the new
-- version fits on the old one's page, Postgres logs only the changed middle of the tuple
-- (and a HOT heartbeat needs the room too). Applies to pages written from now on.
ALTER TABLE skiplock.jobs SET (fillfactor = 50);

-- Producers waiting for work in a queue (`queue` = '': a worker that discovers its queues
-- and must hear of every queue). An insert sends its NOTIFY only for queues somebody waits
-- on (skiplock._notify_inserted): each notifying commit takes a server-wide lock, which
-- capped single-call enqueues at one commit at a time. A producer registers before its
-- last empty claim and leaves while its claims come back full; a worker's rows go with its
-- skiplock.workers row.
CREATE TABLE skiplock.waiting (
    queue  text NOT NULL,
    worker text NOT NULL REFERENCES skiplock.workers (id) ON DELETE CASCADE,
    since  timestamptz NOT NULL DEFAULT now() CHECK (skiplock._time_ok(since)),
    PRIMARY KEY (queue, worker)
);
