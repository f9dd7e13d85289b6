-- Side tables of a chaos run (`skiplock-devtools chaos`, tests/faults.rs): every execution of a
-- `chaos_record` job, and every SIGKILL the driver sent. Recreated at the start of a run.
DROP SCHEMA IF EXISTS skiplock_chaos CASCADE;
CREATE SCHEMA skiplock_chaos;

-- One row per handler run that got as far as its first statement (committed on its own,
-- before the job's ack: a kill in between is exactly the at-least-once case).
CREATE TABLE skiplock_chaos.executions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint NOT NULL,
    attempt    integer NOT NULL,
    worker_id  text NOT NULL,
    pid        integer NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX executions_job_idx ON skiplock_chaos.executions (job_id);

-- One row per worker process the driver killed with SIGKILL (written at the end of the run,
-- since the database may be down at the moment of a kill).
CREATE TABLE skiplock_chaos.kills (
    pid  integer NOT NULL,
    at   timestamptz NOT NULL
);
