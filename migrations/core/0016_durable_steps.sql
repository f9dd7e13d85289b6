-- Durable steps (docs/steps.md): what a job recorded as it ran, so a later attempt (a retry, a
-- rescue, a restart after a kill) resumes after it instead of from its first line.
--
-- One row per recorded step of a job: its `kind` ('step': a named step's result; 'cursor':
-- the job's one cursor, seq 0, written over by each checkpoint; 'sleep': a durable sleep's
-- wake time; 'wait': a wait for a signal, its deadline and then what it got), its name within
-- that kind, its place in the order the job recorded them (`seq`, 1-based; the cap on steps
-- per job counts it), the attempt that recorded it, and `note` when it was recorded while
-- steps an earlier attempt recorded before it had not been replayed (the handler's code
-- changed between attempts). Written by skiplock._record_step only, fenced by the attempt as
-- the ack is; removed with the job by retention (sql/maintenance/retention.sql).
CREATE TABLE skiplock.job_steps (
    job_id bigint NOT NULL,
    seq integer NOT NULL CHECK (seq >= 0),
    kind text NOT NULL CHECK (kind IN ('step', 'cursor', 'sleep', 'wait')),
    name text NOT NULL CHECK (octet_length(name) <= 200),
    attempt integer NOT NULL,
    result jsonb,
    note text,
    recorded_at timestamptz NOT NULL DEFAULT now() CHECK (skiplock._time_ok(recorded_at)),
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, kind, name)
);

-- Signals sent to a job (skiplock.signal): a wait for `name` (skiplock._record_step, kind
-- 'wait') takes the earliest. One per job, name and sender's key scope (docs/security.md,
-- "Tenants"): a scope's second signal of a name is refused, and another scope's signal neither
-- replaces nor blocks it. Removed with the job by retention.
CREATE TABLE skiplock.job_signals (
    job_id bigint NOT NULL,
    name text NOT NULL CHECK (name <> '' AND octet_length(name) <= 200),
    scope text NOT NULL,
    payload jsonb,
    sent_at timestamptz NOT NULL DEFAULT now() CHECK (skiplock._time_ok(sent_at)),
    id bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (job_id, name, scope)
);
