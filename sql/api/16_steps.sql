-- Durable steps (docs/steps.md; tables: migrations/core/0016_durable_steps.sql).

-- The most steps (sleeps and waits included) one job records, and the most bytes of one
-- step's result or cursor (its JSON text): a handler looping over a million items records a
-- cursor, not a million steps (docs/steps.md, "Bounds"). src/worker/steps.rs names the same.
CREATE OR REPLACE FUNCTION skiplock._max_steps() RETURNS integer IMMUTABLE LANGUAGE sql AS $$ SELECT 1000 $$;
CREATE OR REPLACE FUNCTION skiplock._max_step_bytes() RETURNS integer IMMUTABLE LANGUAGE sql AS $$ SELECT 65536 $$;

-- Records what attempt `att` of job `job`, run by `worker`, got from a step (sql/steps/record.sql
-- calls it): its own short statement, right after the step's closure returned. Fenced as the
-- ack is (skiplock._ack): only while the job is still running that attempt for that worker;
-- the job's row is locked FOR SHARE for the statement, so a rescue or a cancel that takes the
-- attempt away either commits first (and nothing is recorded) or waits for this statement.
-- Returns the step's seq (0 for the cursor), NULL when fenced off. A 'step', 'sleep' or
-- 'wait' already recorded keeps its first record, except a pending 'wait' (its result has no
-- `outcome`), which its outcome replaces; the cursor is written over.
CREATE OR REPLACE FUNCTION skiplock._record_step(job bigint, att integer, worker text, step_kind text,
                                                 step_name text, step_result jsonb, step_note text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    next_seq integer;
    done integer;
BEGIN
    IF octet_length(step_result::text) > skiplock._max_step_bytes() THEN
        RAISE EXCEPTION 'skiplock: the result of step % is % bytes (at most %)', quote_literal(step_name),
            octet_length(step_result::text), skiplock._max_step_bytes() USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM skiplock.jobs j
    WHERE j.id = job AND j.state::text = 'running' AND j.attempt = att AND j.attempted_by = worker
    FOR SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF step_kind = 'cursor' THEN
        INSERT INTO skiplock.job_steps AS s (job_id, seq, kind, name, attempt, result)
        VALUES (job, 0, 'cursor', '', att, step_result)
        ON CONFLICT (job_id, seq) DO UPDATE
        SET result = excluded.result, attempt = excluded.attempt, recorded_at = now();
        RETURN 0;
    END IF;
    UPDATE skiplock.job_steps s
    SET result = step_result, attempt = att, recorded_at = now()
    WHERE s.job_id = job AND s.kind = step_kind AND s.name = step_name
      AND s.kind = 'wait' AND NOT (s.result ? 'outcome')
    RETURNING s.seq INTO done;
    IF FOUND THEN
        RETURN done;
    END IF;
    SELECT s.seq INTO done FROM skiplock.job_steps s
    WHERE s.job_id = job AND s.kind = step_kind AND s.name = step_name;
    IF FOUND THEN
        RETURN done;
    END IF;
    SELECT coalesce(max(s.seq), 0) + 1 INTO next_seq FROM skiplock.job_steps s WHERE s.job_id = job;
    IF next_seq > skiplock._max_steps() THEN
        RAISE EXCEPTION 'skiplock: job % has recorded % steps (at most %): step % is not recorded',
            job, next_seq - 1, skiplock._max_steps(), quote_literal(step_name) USING ERRCODE = '22023';
    END IF;
    INSERT INTO skiplock.job_steps (job_id, seq, kind, name, attempt, result, note)
    VALUES (job, next_seq, step_kind, step_name, att, step_result, step_note);
    RETURN next_seq;
END;
$$;

-- The most signals one key scope sends one job (all names together): a tenant cannot grow
-- another's job without bound, nor crowd out its signals (each scope has its own).
CREATE OR REPLACE FUNCTION skiplock._max_signals() RETURNS integer IMMUTABLE LANGUAGE sql AS $$ SELECT 100 $$;

-- A wait for signal `wait_name` of attempt `att` of job `job` (sql/steps/wait.sql calls it;
-- `ctx.wait_for`, docs/steps.md "Signals"): fenced like skiplock._record_step. Answers with
-- the wait's outcome: 'signal' (the earliest signal of that name from one of `scopes`, any
-- scope when NULL, with its payload and sender), 'timed_out', 'waiting' (the attempt ends and
-- the job is due again at `until`, or when the signal comes) or 'fenced' (the attempt was
-- taken away). A wait already answered answers the same again (a later attempt replays it).
-- A signal committed before this statement is read here; one committed later finds the wait
-- (skiplock.signal makes the job due), or, while this attempt's ack is not written yet, is
-- found by skiplock._wake_signalled after it.
CREATE OR REPLACE FUNCTION skiplock._wait_step(job bigint, att integer, worker text, wait_name text,
                                               timeout_secs double precision, scopes text[])
RETURNS TABLE (outcome text, payload jsonb, scope text, sent_at timestamptz, until timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    w jsonb;
    s record;
    due timestamptz;
BEGIN
    PERFORM 1 FROM skiplock.jobs j
    WHERE j.id = job AND j.state::text = 'running' AND j.attempt = att AND j.attempted_by = worker
    FOR SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'fenced'::text, NULL::jsonb, NULL::text, NULL::timestamptz, NULL::timestamptz;
        RETURN;
    END IF;
    SELECT st.result INTO w FROM skiplock.job_steps st
    WHERE st.job_id = job AND st.kind = 'wait' AND st.name = wait_name;
    IF w ? 'outcome' THEN
        RETURN QUERY SELECT w ->> 'outcome', w -> 'payload', w ->> 'scope',
                            (w ->> 'sent_at')::timestamptz, (w ->> 'until')::timestamptz;
        RETURN;
    END IF;
    SELECT g.payload, g.scope, g.sent_at INTO s FROM skiplock.job_signals g
    WHERE g.job_id = job AND g.name = wait_name AND (scopes IS NULL OR g.scope = ANY (scopes))
    ORDER BY g.id LIMIT 1;
    due := coalesce((w ->> 'until')::timestamptz,
                    least(now() + make_interval(secs => greatest(timeout_secs, 0)), '9999-12-31 23:59:59+00'));
    IF FOUND THEN
        PERFORM skiplock._record_step(job, att, worker, 'wait', wait_name,
            jsonb_build_object('until', due, 'outcome', 'signal', 'payload', s.payload,
                               'scope', s.scope, 'sent_at', s.sent_at), NULL);
        RETURN QUERY SELECT 'signal'::text, s.payload, s.scope, s.sent_at, due;
    ELSIF due <= now() THEN
        PERFORM skiplock._record_step(job, att, worker, 'wait', wait_name,
            jsonb_build_object('until', due, 'outcome', 'timed_out'), NULL);
        RETURN QUERY SELECT 'timed_out'::text, NULL::jsonb, NULL::text, NULL::timestamptz, due;
    ELSE
        IF w IS NULL THEN
            PERFORM skiplock._record_step(job, att, worker, 'wait', wait_name,
                jsonb_build_object('until', due, 'scopes', to_jsonb(scopes)), NULL);
        END IF;
        RETURN QUERY SELECT 'waiting'::text, NULL::jsonb, NULL::text, NULL::timestamptz, due;
    END IF;
END;
$$;

-- After the ack of an attempt that ended waiting for `wait_name` (sql/steps/wake_signalled.sql;
-- the worker calls it until it answers other than 'running'): a signal that came between the
-- wait's statement and that ack found the job still running and could not make it due; this
-- makes it due now. 'running' while the attempt is still running (its ack not written yet),
-- 'woken' when it moved the job, 'done' otherwise.
CREATE OR REPLACE FUNCTION skiplock._wake_signalled(job bigint, att integer, worker text, wait_name text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j record;
    w jsonb;
BEGIN
    SELECT x.state::text AS state, x.attempt, x.attempted_by, x.scheduled_at INTO j
    FROM skiplock.jobs x WHERE x.id = job FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'done';
    END IF;
    IF j.state = 'running' AND j.attempt = att AND j.attempted_by = worker THEN
        RETURN 'running';
    END IF;
    IF j.state <> 'available' OR j.scheduled_at <= now() THEN
        RETURN 'done';
    END IF;
    SELECT st.result INTO w FROM skiplock.job_steps st
    WHERE st.job_id = job AND st.kind = 'wait' AND st.name = wait_name;
    IF w IS NULL OR w ? 'outcome' OR NOT EXISTS (
        SELECT 1 FROM skiplock.job_signals g
        WHERE g.job_id = job AND g.name = wait_name
          AND (jsonb_typeof(w -> 'scopes') IS DISTINCT FROM 'array'
               OR g.scope IN (SELECT jsonb_array_elements_text(w -> 'scopes')))) THEN
        RETURN 'done';
    END IF;
    PERFORM skiplock.reschedule(ids => ARRAY[job], run_at => now());
    RETURN 'woken';
END;
$$;

-- Sends signal `name` with `payload` to job `job_id` (docs/steps.md, "Signals"; granted to
-- skiplock_enqueuer, docs/roles.md): kept until the job's wait for that name reads it (signals
-- sent before the wait are kept), and a job waiting for it is made due now. One signal per job,
-- name and sender's key scope (skiplock._key_scope): the scope's second signal of a name is
-- refused (false), another scope's neither replaces nor blocks it; a wait may take only some
-- scopes' signals (docs/security.md, "Signals between tenants"). At most
-- skiplock._max_signals() per job and scope, each payload at most skiplock._max_step_bytes().
-- Refused for a job that does not exist or has finished. Returns whether it was kept.
CREATE OR REPLACE FUNCTION skiplock.signal(job_id bigint, name text, payload jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    j record;
    sender text := skiplock._key_scope();
    w jsonb;
BEGIN
    IF signal.name IS NULL OR signal.name = '' OR octet_length(signal.name) > 200 THEN
        RAISE EXCEPTION 'skiplock: a signal needs a name of 1 to 200 bytes' USING ERRCODE = '22023';
    END IF;
    IF octet_length(signal.payload::text) > skiplock._max_step_bytes() THEN
        RAISE EXCEPTION 'skiplock: the payload of signal % is % bytes (at most %)', quote_literal(signal.name),
            octet_length(signal.payload::text), skiplock._max_step_bytes() USING ERRCODE = '22023';
    END IF;
    -- No lock on the row: a tenant that leaves its transaction open after a signal must hold
    -- nothing a worker needs (a running job's row is in every heartbeat of its worker;
    -- docs/security.md, "Signals between tenants"). Only a job that sleeps waiting for this
    -- signal is locked, by the reschedule that makes it due.
    SELECT x.state::text AS state, x.scheduled_at INTO j
    FROM skiplock.jobs x WHERE x.id = signal.job_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: no job %', signal.job_id USING ERRCODE = 'P0002';
    END IF;
    IF j.state IN ('completed', 'discarded', 'cancelled') THEN
        RAISE EXCEPTION 'skiplock: job % has finished (%): it waits for no signal', signal.job_id, j.state
            USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(*) FROM skiplock.job_signals g
        WHERE g.job_id = signal.job_id AND g.scope = sender) >= skiplock._max_signals() THEN
        RAISE EXCEPTION 'skiplock: job % has % signals from this scope (at most %)', signal.job_id,
            skiplock._max_signals(), skiplock._max_signals() USING ERRCODE = '22023';
    END IF;
    INSERT INTO skiplock.job_signals AS g (job_id, name, scope, payload)
    VALUES (signal.job_id, signal.name, sender, signal.payload)
    ON CONFLICT ON CONSTRAINT job_signals_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF j.state = 'available' AND j.scheduled_at > now() THEN
        SELECT st.result INTO w FROM skiplock.job_steps st
        WHERE st.job_id = signal.job_id AND st.kind = 'wait' AND st.name = signal.name;
        IF w IS NOT NULL AND NOT (w ? 'outcome')
           AND (jsonb_typeof(w -> 'scopes') IS DISTINCT FROM 'array'
                OR sender IN (SELECT jsonb_array_elements_text(w -> 'scopes'))) THEN
            PERFORM skiplock.reschedule(ids => ARRAY[signal.job_id], run_at => now());
        END IF;
    END IF;
    RETURN true;
END;
$$;
