-- History tables of a partition run (`skiplock-devtools chaos --partitions`, tests/partitions.rs),
-- kept apart from the worker's own bookkeeping and in the default tablespace, so a full
-- disk under the jobs' tablespace never stops the history being written. Recreated per run.
DROP SCHEMA IF EXISTS skiplock_faults CASCADE;
CREATE SCHEMA skiplock_faults;

-- One row per handler run that got as far as its first statement: written when the handler
-- starts, its end and outcome filled in when it ends (left NULL when that write failed).
CREATE TABLE skiplock_faults.executions (
    id          bigint GENERATED ALWAYS AS IDENTITY,
    job_id      bigint NOT NULL,
    attempt     integer NOT NULL,
    worker_id   text NOT NULL,
    pid         integer NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at    timestamptz,
    outcome     text,
    PRIMARY KEY (id) USING INDEX TABLESPACE pg_default
) TABLESPACE pg_default;

-- Every change of a job's state or attempt, written in the transaction that made it (a
-- trigger): who owned the attempt before, which session changed it (the client's address and
-- port: each worker process has a network namespace and address of its own; 127.0.0.1 is the
-- driver, 'local' a Unix socket), whether it was a rescue, and the heartbeat the job had until
-- then.
CREATE TABLE skiplock_faults.transitions (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    job_id        bigint NOT NULL,
    old_attempt   integer NOT NULL,
    new_attempt   integer NOT NULL,
    old_state     text NOT NULL,
    new_state     text NOT NULL,
    old_owner     text,
    new_owner     text,
    changed_by    text NOT NULL,
    port          integer,
    rescue        boolean NOT NULL,
    last_beat     timestamptz,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (id) USING INDEX TABLESPACE pg_default
) TABLESPACE pg_default;

-- Every enqueue the driver made and its result (written at the end of the run).
CREATE TABLE skiplock_faults.enqueues (
    op         integer NOT NULL,
    what       text NOT NULL,
    ns         bigint[] NOT NULL,
    ok         boolean NOT NULL,
    ids        bigint[] NOT NULL,
    outcome    text,
    error      text,
    at         timestamptz NOT NULL
) TABLESPACE pg_default;

-- Every fault the driver injected: its kind, the worker slot and process it hit (NULL for
-- the whole server), the one connection it hit (its port on the worker; NULL: all of them),
-- when it began and ended (written at the end of the run).
CREATE TABLE skiplock_faults.faults (
    kind       text NOT NULL,
    slot       integer,
    pid        integer,
    port       integer,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL
) TABLESPACE pg_default;

CREATE FUNCTION skiplock_faults.record_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO skiplock_faults.transitions
        (job_id, old_attempt, new_attempt, old_state, new_state, old_owner, new_owner, changed_by,
         port, rescue, last_beat)
    VALUES (NEW.id, OLD.attempt, NEW.attempt, OLD.state::text, NEW.state::text, OLD.attempted_by,
            NEW.attempted_by, coalesce(host(inet_client_addr()), 'local'), inet_client_port(),
            -- A rescue appends its entry, then (a keyed job superseded) another one.
            EXISTS (SELECT 1 FROM jsonb_array_elements(NEW.errors) WITH ORDINALITY AS e(x, i)
                    WHERE i > jsonb_array_length(OLD.errors) AND x->>'error' LIKE 'rescued:%'),
            coalesce(OLD.heartbeat_at, OLD.attempted_at));
    RETURN NULL;
END;
$$;

CREATE TRIGGER record_transition AFTER UPDATE ON skiplock.jobs
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt)
EXECUTE FUNCTION skiplock_faults.record_transition();
