-- Admission control (docs/operations.md, "Admission control"): a queue may hold at most
-- max_waiting available jobs (due now or later); an enqueue that would make more is refused
-- whole. A table of its own, not a column of skiplock.queues: a queue with a row there is
-- claimed through the limited claim, and a limit on waiting jobs must not slow the claims.
-- Empty unless a limit is set: the insert trigger (sql/api/10_core.sql) reads this table
-- first and does nothing more while it is empty.
CREATE TABLE skiplock.queue_admission (
    queue        text NOT NULL,
    max_waiting  integer NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_admission_pkey PRIMARY KEY (queue),
    CONSTRAINT queue_admission_max_waiting_check CHECK (max_waiting >= 0),
    CONSTRAINT queue_admission_queue_check CHECK (queue <> '' AND length(queue) <= 200),
    CONSTRAINT queue_admission_updated_at_check CHECK (skiplock._time_ok(updated_at))
);
