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
