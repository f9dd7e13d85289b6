-- Maintenance: periodic job definitions (as declared by running workers, for operators) and
-- one row per enqueued period. The jobs table's unique index only covers `available` rows,
-- so it cannot stop a second process from enqueueing a period whose job already ran; the
-- primary key of periodic_runs can, because the row is inserted in the same transaction as
-- the job and outlives it.

CREATE TABLE skiplock.periodic_jobs (
    name         text PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    -- As written: `every 15m` or `cron 0 0 3 * * *`.
    schedule     text NOT NULL,
    kind         text NOT NULL,
    queue        text NOT NULL,
    args         jsonb NOT NULL DEFAULT '{}',
    -- The worker that last declared it, and when.
    declared_by  text NOT NULL,
    declared_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE skiplock.periodic_runs (
    name          text NOT NULL,
    -- The fire time this run belongs to (the same value in every process).
    period_start  timestamptz NOT NULL,
    -- The job enqueued for it (no foreign key: retention deletes finished jobs).
    job_id        bigint,
    enqueued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, period_start)
);
