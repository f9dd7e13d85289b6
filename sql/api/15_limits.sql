-- Queue control (issue 14, issue 15): limits enforced at claim time, and pause/resume.
-- State lives in skiplock.queues (migrations/0008_limits.sql). A queue without a row there
-- is neither limited nor paused, and its producers use the plain claim (sql/queue/claim.sql),
-- which refuses to claim from a queue that has a row; those producers then claim through
-- skiplock._claim_limited. Every setter below is SECURITY DEFINER (fixed search_path, every
-- name qualified), so a role granted EXECUTE needs no write privilege on the tables; the
-- operator role (the console's login) is granted pause_queue and resume_queue only
-- (sql/api/90_roles.sql), the limits stay with the owner.

-- Deletes the row of `q` once nothing in it is set, so the queue goes back to the plain claim.
CREATE OR REPLACE FUNCTION skiplock._queue_tidy(q text) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM skiplock.queues c
    WHERE c.queue = q AND NOT c.paused AND c.concurrency IS NULL
      AND c.key_concurrency IS NULL AND c.key_rate IS NULL;
$$;

-- Refuses a queue name no job could carry (as skiplock._check_job does for enqueue).
CREATE OR REPLACE FUNCTION skiplock._check_queue_name(q text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF q IS NULL OR q = '' OR length(q) > 200 THEN
        RAISE EXCEPTION 'skiplock: queue name must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- At most `concurrency` running jobs of `queue`, all workers together (NULL: no limit).
-- Takes effect at the next claim; producers are woken so a raised limit is used at once.
CREATE OR REPLACE FUNCTION skiplock.set_queue_limit(queue text, concurrency integer)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM skiplock._check_queue_name(set_queue_limit.queue);
    IF set_queue_limit.concurrency IS NOT NULL AND set_queue_limit.concurrency < 1 THEN
        RAISE EXCEPTION 'skiplock: queue concurrency must be at least 1 (NULL: no limit; to stop a queue, pause it), got %',
            set_queue_limit.concurrency USING ERRCODE = '22023';
    END IF;
    INSERT INTO skiplock.queues AS c (queue, concurrency)
    VALUES (set_queue_limit.queue, set_queue_limit.concurrency)
    ON CONFLICT ON CONSTRAINT queues_pkey DO UPDATE SET concurrency = EXCLUDED.concurrency, updated_at = now();
    PERFORM skiplock._queue_tidy(set_queue_limit.queue);
    PERFORM pg_notify('skiplock_wake', set_queue_limit.queue);
END;
$$;

-- Per limit_key of `queue`: at most `concurrency` running jobs, and at most `rate` starts
-- per `period` (GCRA: a burst of `rate`, then one start every period / rate). NULL clears
-- each; rate and period go together.
CREATE OR REPLACE FUNCTION skiplock.set_key_limit(queue text, concurrency integer DEFAULT NULL,
                                                  rate integer DEFAULT NULL, period interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM skiplock._check_queue_name(set_key_limit.queue);
    IF set_key_limit.concurrency IS NOT NULL AND set_key_limit.concurrency < 1 THEN
        RAISE EXCEPTION 'skiplock: per-key concurrency must be at least 1 (NULL: no limit), got %',
            set_key_limit.concurrency USING ERRCODE = '22023';
    END IF;
    IF (set_key_limit.rate IS NULL) <> (set_key_limit.period IS NULL) THEN
        RAISE EXCEPTION 'skiplock: a key rate needs both rate and period (or neither)' USING ERRCODE = '22023';
    END IF;
    IF set_key_limit.rate IS NOT NULL AND set_key_limit.rate < 1 THEN
        RAISE EXCEPTION 'skiplock: key rate must be at least 1 per period, got %', set_key_limit.rate
            USING ERRCODE = '22023';
    END IF;
    IF set_key_limit.period IS NOT NULL
       AND (set_key_limit.period <= interval '0' OR set_key_limit.period > interval '366 days') THEN
        RAISE EXCEPTION 'skiplock: key rate period must be more than 0 and at most 366 days, got %',
            set_key_limit.period USING ERRCODE = '22023';
    END IF;
    INSERT INTO skiplock.queues AS c (queue, key_concurrency, key_rate, key_period)
    VALUES (set_key_limit.queue, set_key_limit.concurrency, set_key_limit.rate, set_key_limit.period)
    ON CONFLICT ON CONSTRAINT queues_pkey DO UPDATE SET key_concurrency = EXCLUDED.key_concurrency,
        key_rate = EXCLUDED.key_rate, key_period = EXCLUDED.key_period, updated_at = now();
    IF set_key_limit.rate IS NULL THEN
        DELETE FROM skiplock.key_rates kr WHERE kr.queue = set_key_limit.queue;
    END IF;
    PERFORM skiplock._queue_tidy(set_key_limit.queue);
    PERFORM pg_notify('skiplock_wake', set_key_limit.queue);
END;
$$;

-- Changes one of a queue's per-key limits, or both, and keeps the other as it is: the key
-- concurrency when `set_concurrency` (to `concurrency`; NULL clears it), the key rate when
-- `set_rate` (to `rate` per `period`; both NULL clear it). The queue's row is locked while the
-- kept value is read and the new ones written, so two operators changing different limits of
-- one queue at the same time (`skiplock queue limit --per-key …` and `--rate …`) both land.
-- Same checks and wake-up as skiplock.set_key_limit, which does the write.
CREATE OR REPLACE FUNCTION skiplock.change_key_limit(queue text, set_concurrency boolean, concurrency integer,
                                                     set_rate boolean, rate integer, period interval)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    cur skiplock.queues;
BEGIN
    PERFORM skiplock._check_queue_name(change_key_limit.queue);
    -- A row to lock even for a queue without one (set_key_limit tidies it away if it stays
    -- empty); a concurrent change of the same queue (its insert or its update) is waited for
    -- here until it commits, and the row stays locked until this change commits. A change
    -- that emptied and deleted the row in between leaves nothing to lock: insert it again.
    LOOP
        INSERT INTO skiplock.queues AS c (queue) VALUES (change_key_limit.queue)
        ON CONFLICT ON CONSTRAINT queues_pkey DO NOTHING;
        SELECT * INTO cur FROM skiplock.queues c WHERE c.queue = change_key_limit.queue FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    PERFORM skiplock.set_key_limit(
        change_key_limit.queue,
        CASE WHEN change_key_limit.set_concurrency THEN change_key_limit.concurrency ELSE cur.key_concurrency END,
        CASE WHEN change_key_limit.set_rate THEN change_key_limit.rate ELSE cur.key_rate END,
        CASE WHEN change_key_limit.set_rate THEN change_key_limit.period ELSE cur.key_period END);
END;
$$;

-- No worker claims from a paused queue (at the latest at its next claim, within one poll
-- interval); running jobs finish. Returns whether the queue was running before.
CREATE OR REPLACE FUNCTION skiplock.pause_queue(queue text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    was boolean;
BEGIN
    PERFORM skiplock._check_queue_name(pause_queue.queue);
    SELECT c.paused INTO was FROM skiplock.queues c WHERE c.queue = pause_queue.queue FOR UPDATE;
    INSERT INTO skiplock.queues AS c (queue, paused) VALUES (pause_queue.queue, true)
    ON CONFLICT ON CONSTRAINT queues_pkey DO UPDATE SET paused = true, updated_at = now();
    -- Workers holding jobs of the queue claimed ahead put them back at once (SQL API 6).
    PERFORM pg_notify('skiplock_wake', pause_queue.queue);
    RETURN NOT coalesce(was, false);
END;
$$;

-- Claims from `queue` again; idle workers are woken at once. Returns whether it was paused.
CREATE OR REPLACE FUNCTION skiplock.resume_queue(queue text)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    was boolean;
BEGIN
    PERFORM skiplock._check_queue_name(resume_queue.queue);
    UPDATE skiplock.queues c SET paused = false, updated_at = now()
    WHERE c.queue = resume_queue.queue AND c.paused;
    was := FOUND;
    PERFORM skiplock._queue_tidy(resume_queue.queue);
    PERFORM pg_notify('skiplock_wake', resume_queue.queue);
    RETURN was;
END;
$$;

-- The claim of a controlled queue (one with a row in skiplock.queues). Returns the claimed
-- jobs (the columns of sql/queue/claim.sql) and always one extra row with id NULL that says
-- whether the queue is still controlled (false: use the plain claim again), the earliest
-- time a job skipped for a key's rate becomes allowed (NULL: none, or unknown: a running job
-- must finish first) and how many jobs the queue let this claim buffer at most (`buffer_room`,
-- below; NULL: no bound). Every column repeats those three.
--
-- Limited claims of one queue are serialized by the lock on its row; every later statement
-- of this (volatile) function takes a fresh snapshot, so the running jobs counted include
-- those the previous claimer committed. Jobs that may not start are not touched: they spend
-- no attempt and no worker slot. A job without limit_key is never held back by a key's
-- limits, only by the queue's concurrency. The scan for startable jobs reads at most
-- 10 windows of 1000 due jobs, each window skipping the keys found blocked so far.
--
-- `n` jobs are for the worker's free slots; `ahead` more may go into its buffer (claim-ahead,
-- SQL API 6), but only in a queue whose one limit is its concurrency (a key's rate counts a
-- start at the claim, and a buffered job would hold a key's slot without running), and only
-- half of the room the limit leaves after the free slots: a buffered job counts as running, so
-- the limit holds, and while it binds the buffers stay empty and the room goes to slots that
-- can run a job now (another worker's, too).
DROP FUNCTION IF EXISTS skiplock._claim_limited(text, text[], integer, text);
CREATE OR REPLACE FUNCTION skiplock._claim_limited(q text, kinds text[], n integer, worker text,
                                                   ahead integer DEFAULT 0)
RETURNS TABLE (id bigint, kind text, queue text, args jsonb, priority smallint, attempt integer,
               max_attempts integer, scheduled_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, controlled boolean, wait_until timestamptz,
               buffer_room integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    ctl skiplock.queues;
    -- Whether the queue has a row (false: nothing is claimed, the caller goes back to the
    -- plain claim).
    is_controlled boolean;
    free integer := n;
    extra integer := ahead;
    -- The buffer's share of the room (see above; NULL: no bound), reported to the worker.
    room integer := 0;
    picked bigint[] := '{}';
    blocked text[] := '{}';
    key_counts jsonb := '{}';
    next_at timestamptz;
    r record;
    k_count integer;
    k_tat timestamptz;
    step interval;
    tau interval;
    passes integer := 0;
    seen integer;
    t timestamptz;
BEGIN
    SELECT * INTO ctl FROM skiplock.queues c WHERE c.queue = q FOR UPDATE;
    is_controlled := FOUND;
    -- Key rates count starts on the clock once this claim holds the queue's row, not at
    -- the transaction's start: a claim that waited for the lock starts later than now().
    t := clock_timestamp();
    IF NOT is_controlled OR ctl.paused OR coalesce(cardinality(kinds), 0) = 0 THEN
        free := 0;
        extra := 0;
    END IF;
    free := greatest(coalesce(free, 0), 0);
    IF is_controlled AND NOT ctl.paused AND ctl.concurrency IS NULL
       AND ctl.key_concurrency IS NULL AND ctl.key_rate IS NULL THEN
        room := NULL;
    ELSIF ctl.key_concurrency IS NOT NULL OR ctl.key_rate IS NOT NULL THEN
        extra := 0;
    END IF;
    extra := greatest(coalesce(extra, 0), 0);
    IF (free > 0 OR extra > 0) AND ctl.concurrency IS NOT NULL THEN
        SELECT ctl.concurrency - count(*) INTO k_count
        FROM skiplock.jobs j WHERE j.state = 'running' AND j.queue = q;
        free := greatest(least(free, k_count), 0);
        IF ctl.key_concurrency IS NULL AND ctl.key_rate IS NULL THEN
            room := greatest(k_count - free, 0) / 2;
        END IF;
        extra := least(extra, room);
    END IF;
    free := free + extra;

    IF free > 0 AND ctl.key_concurrency IS NULL AND ctl.key_rate IS NULL THEN
        SELECT coalesce(array_agg(p.id), '{}') INTO picked FROM (
            SELECT j.id FROM skiplock.jobs j
            WHERE j.state = 'available' AND j.queue = q AND j.scheduled_at <= now()
              AND j.kind = ANY(kinds)
            ORDER BY j.priority, j.scheduled_at, j.id
            LIMIT free
            FOR UPDATE SKIP LOCKED) p;
    ELSIF free > 0 THEN
        IF ctl.key_rate IS NOT NULL THEN
            step := ctl.key_period / ctl.key_rate;
            tau := ctl.key_period - step;
        END IF;
        LOOP
            passes := passes + 1;
            seen := 0;
            FOR r IN
                SELECT j.id, j.limit_key FROM skiplock.jobs j
                WHERE j.state = 'available' AND j.queue = q AND j.scheduled_at <= now()
                  AND j.kind = ANY(kinds)
                  AND NOT (j.id = ANY(picked))
                  AND (j.limit_key IS NULL OR NOT (j.limit_key = ANY(blocked)))
                ORDER BY j.priority, j.scheduled_at, j.id
                LIMIT 1000
            LOOP
                seen := seen + 1;
                IF r.limit_key IS NOT NULL THEN
                    CONTINUE WHEN r.limit_key = ANY(blocked);
                    IF ctl.key_concurrency IS NOT NULL THEN
                        IF NOT key_counts ? r.limit_key THEN
                            SELECT count(*) INTO k_count FROM skiplock.jobs j
                            WHERE j.state = 'running' AND j.queue = q AND j.limit_key = r.limit_key;
                            key_counts := key_counts || jsonb_build_object(r.limit_key, k_count);
                        END IF;
                        IF (key_counts->>r.limit_key)::integer >= ctl.key_concurrency THEN
                            blocked := blocked || r.limit_key;
                            CONTINUE;
                        END IF;
                    END IF;
                    IF ctl.key_rate IS NOT NULL THEN
                        -- The key's start, if its rate allows one now: one statement when
                        -- it does (the common case), a read to tell a blocked key from a new
                        -- one when it does not.
                        UPDATE skiplock.key_rates kr SET tat = greatest(kr.tat, t) + step
                        WHERE kr.queue = q AND kr.limit_key = r.limit_key AND kr.tat - tau <= t;
                        IF NOT FOUND THEN
                            SELECT kr.tat INTO k_tat FROM skiplock.key_rates kr
                            WHERE kr.queue = q AND kr.limit_key = r.limit_key;
                            IF k_tat IS NOT NULL THEN
                                blocked := blocked || r.limit_key;
                                next_at := least(next_at, k_tat - tau);
                                CONTINUE;
                            END IF;
                            INSERT INTO skiplock.key_rates AS kr (queue, limit_key, tat)
                            VALUES (q, r.limit_key, t + step)
                            ON CONFLICT ON CONSTRAINT key_rates_pkey
                            DO UPDATE SET tat = greatest(kr.tat, t) + step;
                        END IF;
                    END IF;
                    IF ctl.key_concurrency IS NOT NULL THEN
                        key_counts := key_counts || jsonb_build_object(r.limit_key,
                                                                       (key_counts->>r.limit_key)::integer + 1);
                    END IF;
                END IF;
                picked := picked || r.id;
                free := free - 1;
                EXIT WHEN free <= 0;
            END LOOP;
            EXIT WHEN free <= 0 OR seen < 1000 OR passes >= 10;
        END LOOP;
    END IF;

    IF cardinality(picked) > 0 THEN
        RETURN QUERY
        WITH locked AS (
            SELECT j.id FROM skiplock.jobs j
            WHERE j.id = ANY(picked) AND j.state = 'available'
            FOR UPDATE SKIP LOCKED
        )
        UPDATE skiplock.jobs j
        SET state = 'running',
            attempt = j.attempt + 1,
            -- The start the key rates counted (see t above).
            attempted_at = t,
            attempted_by = worker,
            heartbeat_at = now()
        FROM locked
        WHERE j.id = locked.id
        RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
                  j.scheduled_at, j.created_at, j.attempted_at, true, next_at, room;
    END IF;
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::smallint,
        NULL::integer, NULL::integer, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
        is_controlled, next_at, room;
END;
$$;

-- The queues with control settings or jobs: limits, paused, and counts (skiplock queue list).
CREATE OR REPLACE VIEW skiplock.queue_control AS
SELECT coalesce(c.queue, s.queue) AS queue,
       coalesce(c.paused, false) AS paused,
       c.concurrency, c.key_concurrency, c.key_rate, c.key_period,
       coalesce(s.available, 0) AS available,
       coalesce(s.running, 0) AS running
FROM skiplock.queues c
FULL JOIN (SELECT j.queue,
                  count(*) FILTER (WHERE j.state = 'available') AS available,
                  count(*) FILTER (WHERE j.state = 'running') AS running
           FROM skiplock.jobs j WHERE j.state IN ('available', 'running')
           GROUP BY j.queue) s ON s.queue = c.queue;
