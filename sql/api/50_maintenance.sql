-- Maintenance SQL API: enqueueing one period of a periodic job, exactly once across every
-- process that runs the scheduler. Installed (CREATE OR REPLACE) by `skiplock migrate`.

-- Enqueue the job of period `period_start` of periodic job `name`, unless some process already
-- did. Returns the new job's id, or NULL when nothing was enqueued because:
--   * the period is already recorded (another process, or this one, enqueued it), or
--   * a later period is already recorded (a process with a lagging clock), or
--   * the periodic job has never run and the period started before `first_after` (the
--     caller's start): a newly declared job starts with its next fire time, not at deploy.
-- The run row and the job are written in one transaction, so a period is never recorded
-- without its job or enqueued twice: an enqueue that raises (its unique_key held by another
-- kind or queue, say) records nothing, and the scheduler tries the period again on its next
-- tick, recording the failure in skiplock.periodic_jobs meanwhile; an enqueue that succeeds
-- clears that record.
CREATE OR REPLACE FUNCTION skiplock.enqueue_periodic(
    name text,
    period_start timestamptz,
    first_after timestamptz,
    kind text,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority smallint DEFAULT 0,
    max_attempts integer DEFAULT 25,
    unique_key text DEFAULT NULL,
    on_conflict text DEFAULT 'keep'
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    IF enqueue_periodic.name IS NULL OR enqueue_periodic.name = '' THEN
        RAISE EXCEPTION 'skiplock: periodic job name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF enqueue_periodic.period_start IS NULL THEN
        RAISE EXCEPTION 'skiplock: period_start must not be NULL' USING ERRCODE = '22023';
    END IF;
    -- Stored in periodic_runs. (first_after is only compared: '-infinity' means "any".)
    PERFORM skiplock._check_time('period_start', enqueue_periodic.period_start);
    IF EXISTS (SELECT 1 FROM skiplock.periodic_runs r
               WHERE r.name = enqueue_periodic.name AND r.period_start > enqueue_periodic.period_start) THEN
        RETURN NULL;
    END IF;
    IF enqueue_periodic.period_start < enqueue_periodic.first_after
       AND NOT EXISTS (SELECT 1 FROM skiplock.periodic_runs r WHERE r.name = enqueue_periodic.name) THEN
        RETURN NULL;
    END IF;
    INSERT INTO skiplock.periodic_runs (name, period_start)
    VALUES (enqueue_periodic.name, enqueue_periodic.period_start)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The built-in maintenance jobs live in skiplock's own queue (`skiplock.` prefix), which
    -- skiplock.enqueue refuses (skiplock._reserved_job): the scheduler, a worker-role
    -- function, may put jobs there; every other periodic job obeys skiplock.enqueue's rules.
    IF starts_with(enqueue_periodic.queue, 'skiplock.')
       AND skiplock._reserved_key_prefix(enqueue_periodic.unique_key) IS NULL THEN
        new_id := skiplock._enqueue(enqueue_periodic.kind, enqueue_periodic.args, enqueue_periodic.queue, now(),
                                    enqueue_periodic.priority, enqueue_periodic.max_attempts,
                                    enqueue_periodic.unique_key, enqueue_periodic.on_conflict);
    ELSE
        new_id := skiplock.enqueue(enqueue_periodic.kind, enqueue_periodic.args, enqueue_periodic.queue, now(),
                                   enqueue_periodic.priority, enqueue_periodic.max_attempts,
                                   enqueue_periodic.unique_key, enqueue_periodic.on_conflict);
    END IF;
    UPDATE skiplock.periodic_runs r SET job_id = new_id
    WHERE r.name = enqueue_periodic.name AND r.period_start = enqueue_periodic.period_start;
    -- A failed enqueue of an earlier period is over (recorded by the scheduler,
    -- sql/maintenance/record_periodic_failure.sql); the guard keeps the common case a read.
    UPDATE skiplock.periodic_jobs p
    SET last_error = NULL, last_error_at = NULL, last_error_period = NULL
    WHERE p.name = enqueue_periodic.name AND p.last_error IS NOT NULL;
    RETURN new_id;
END;
$$;
