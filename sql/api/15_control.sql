-- Queue control (docs/concepts.md): limits enforced at claim time, and pause/resume.
-- State lives in skiplock.queues (migrations/history/0008_limits.sql). A queue without a row there
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
      AND c.key_concurrency IS NULL AND c.key_rate IS NULL AND NOT c.fair;
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

-- Admission control (docs/operations.md, "Admission control"): at most `max_waiting` available
-- jobs (due now or later) in `queue`; NULL removes the limit. An enqueue (or enqueue_many, or
-- a flow) that would make more is refused whole with SQLSTATE SK429 by the insert trigger
-- (skiplock._notify_inserted, sql/api/10_jobs.sql). Lowering the limit below what waits now
-- removes nothing: enqueues are refused until the workers drain the queue under it.
-- Setting a limit (a new one or a change) forgets the trigger's bound of the queue's
-- available jobs (`admitted`, migrations/core/0017_admission_counter.sql), so the next enqueue
-- counts them exactly; it takes the queue's advisory lock as the trigger does, so an enqueue
-- in flight is judged wholly before it or wholly after it.
CREATE OR REPLACE FUNCTION skiplock.set_queue_admission(queue text, max_waiting integer)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM skiplock._check_queue_name(set_queue_admission.queue);
    IF set_queue_admission.max_waiting IS NULL THEN
        DELETE FROM skiplock.queue_admission a WHERE a.queue = set_queue_admission.queue;
        RETURN;
    END IF;
    IF set_queue_admission.max_waiting < 0 THEN
        RAISE EXCEPTION 'skiplock: max_waiting must be at least 0 (NULL: no limit), got %',
            set_queue_admission.max_waiting USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('skiplock.queue_admission'), hashtext(set_queue_admission.queue));
    INSERT INTO skiplock.queue_admission AS a (queue, max_waiting)
    VALUES (set_queue_admission.queue, set_queue_admission.max_waiting)
    ON CONFLICT ON CONSTRAINT queue_admission_pkey
    DO UPDATE SET max_waiting = EXCLUDED.max_waiting, updated_at = now(),
                  admitted = NULL, counted_at = NULL;
END;
$$;

-- Fair mode on or off (docs/concepts.md, "Fair queues"): a fair queue's claims serve its
-- limit keys round-robin (skiplock._fair_pick), so one key's backlog delays another key's
-- first job by at most one claim. Its claims go through skiplock._claim_limited (the queue has
-- a row) and wait for each other on that row. Under a key's limits the claim's walk over the
-- keys decides instead (each key gives at most its allowance), and the flag changes nothing.
CREATE OR REPLACE FUNCTION skiplock.set_queue_fairness(queue text, fair boolean)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM skiplock._check_queue_name(set_queue_fairness.queue);
    IF set_queue_fairness.fair IS NULL THEN
        RAISE EXCEPTION 'skiplock: fair must be true or false' USING ERRCODE = '22023';
    END IF;
    INSERT INTO skiplock.queues AS c (queue, fair) VALUES (set_queue_fairness.queue, set_queue_fairness.fair)
    ON CONFLICT ON CONSTRAINT queues_pkey DO UPDATE SET fair = EXCLUDED.fair, updated_at = now();
    IF NOT set_queue_fairness.fair THEN
        DELETE FROM skiplock.key_scans ks WHERE ks.queue = set_queue_fairness.queue;
        DELETE FROM skiplock.key_lanes kl WHERE kl.queue = set_queue_fairness.queue;
    ELSE
        -- The keys it has now (skiplock.key_lanes: the fair pick walks them), each awake or
        -- asleep until its earliest job: a loose index scan of jobs_key_claim_idx, once.
        INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
        WITH RECURSIVE k AS (
            (SELECT j.limit_key AS key FROM skiplock.jobs j
             WHERE j.state = 'available' AND j.queue = set_queue_fairness.queue AND j.limit_key > ''
             ORDER BY j.limit_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.limit_key FROM skiplock.jobs j
                    WHERE j.state = 'available' AND j.queue = set_queue_fairness.queue AND j.limit_key > k.key
                    ORDER BY j.limit_key LIMIT 1)
            FROM k WHERE k.key IS NOT NULL
        )
        SELECT set_queue_fairness.queue, k.key, CASE WHEN f.first_at <= now() THEN NULL ELSE skiplock._time_clamp(f.first_at) END
        FROM k
        CROSS JOIN LATERAL (SELECT min(j.scheduled_at) AS first_at FROM skiplock.jobs j
                            WHERE j.state = 'available' AND j.queue = set_queue_fairness.queue
                              AND j.limit_key = k.key) f
        WHERE k.key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                          WHERE l.queue = set_queue_fairness.queue AND l.limit_key = k.key);
    END IF;
    PERFORM skiplock._queue_tidy(set_queue_fairness.queue);
    PERFORM pg_notify(skiplock._wake_channel(), set_queue_fairness.queue);
END;
$$;

-- Up to `n` limit keys of queue `q` with available jobs, in key order after `after` (NULL:
-- from the first) and not after `upto` (NULL: to the last): a loose index scan of
-- jobs_key_claim_idx, one probe per key: the walk of the fair pick and of the key limits'
-- claim. No key is '' (skiplock._check_limit_key), and a deterministic collation orders ''
-- before every other text, so `> ''` starts from the first key. PL/pgSQL for its kept plan
-- (a SQL function's recursive query would be planned at every call), without sequential scans
-- as the claim's (skiplock._claim says why).
CREATE OR REPLACE FUNCTION skiplock._keys_between(q text, after text, upto text, n integer)
RETURNS text[]
SET enable_seqscan = off
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
    WITH RECURSIVE w AS (
        (SELECT j.limit_key AS k, 1 AS i FROM skiplock.jobs j
         WHERE j.state = 'available' AND j.queue = q AND j.limit_key > coalesce(after, '')
         ORDER BY j.limit_key LIMIT 1)
        UNION ALL
        SELECT (SELECT j.limit_key FROM skiplock.jobs j
                WHERE j.state = 'available' AND j.queue = q AND j.limit_key > w.k
                ORDER BY j.limit_key LIMIT 1), w.i + 1
        FROM w WHERE w.k IS NOT NULL AND w.i < n
    )
    SELECT coalesce(array_agg(w.k ORDER BY w.i), '{}') FROM w
    WHERE w.k IS NOT NULL AND (upto IS NULL OR w.k <= upto));
END;
$$;

-- Up to `n` limit keys of fair queue `q` that may have due jobs (skiplock.key_lanes: awake,
-- or asleep until a time that has come), in key order after `after` (NULL: from the first)
-- and not after `upto` (NULL: to the last). A key whose jobs are all due later is not among
-- them: however many such keys a queue has, the walk of the fair pick never reads one.
CREATE OR REPLACE FUNCTION skiplock._fair_keys_between(q text, after text, upto text, n integer)
RETURNS text[]
SET enable_seqscan = off
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN ARRAY(
        SELECT DISTINCT u.k FROM (
            (SELECT l.limit_key AS k FROM skiplock.key_lanes l
             WHERE l.queue = q AND l.due_at IS NULL AND l.limit_key > coalesce(after, '')
               AND (upto IS NULL OR l.limit_key <= upto)
             ORDER BY l.limit_key LIMIT n)
            UNION ALL
            (SELECT l.limit_key FROM skiplock.key_lanes l
             WHERE l.queue = q AND l.due_at <= now() AND l.limit_key > coalesce(after, '')
               AND (upto IS NULL OR l.limit_key <= upto)
             ORDER BY l.due_at LIMIT n)
        ) u
        ORDER BY 1 LIMIT n);
END;
$$;

-- The pick of a fair queue (skiplock.set_queue_fairness): up to `want` due jobs of `kinds`,
-- round-robin over its limit keys (the jobs without a key count as one more key): each key's
-- first job in claim order, then each key's second, and so on. The keys are read from after
-- the last one the previous claim read (skiplock.key_scans.after_key), wrapping round to the
-- first, a quarter of `want` at a time (one index probe each: a claim's keys cost about as
-- much as a quarter of its jobs), so with more keys than that every key is reached within
-- keys / (want / 4) claims. Each key of a round gives at most 2 * (jobs still wanted) / keys
-- candidates: a round reads about twice the jobs it wants however large one key's backlog is.
-- While jobs are still wanted (keys with nothing due: held, scheduled later, or of kinds this
-- worker does not run) the walk goes on to the next keys, at most once round all the keys and
-- at most `claim_limited.max_keys` keys (skiplock.settings, as the key limits' walk), so a
-- claim never comes back empty while a key further on has due jobs and its worker waits a poll
-- for nothing. Returns the ids in pick order, not locked: skiplock._claim_limited locks them
-- (SKIP LOCKED) as it does every pick. The claims of one queue are serialized by its row's
-- lock (skiplock._claim_limited), so the cursor is theirs alone.
CREATE OR REPLACE FUNCTION skiplock._fair_pick(q text, kinds text[], want integer)
RETURNS bigint[]
-- See skiplock._claim: plans kept from the function's first calls must not scan the table.
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
DECLARE
    start_key text;
    cursor_key text;
    wrapped boolean := false;
    keys text[];
    n_keys integer;
    max_keys integer;
    examined integer := 0;
    per_key integer;
    got bigint[];
    picked bigint[] := '{}';
BEGIN
    IF coalesce(want, 0) <= 0 THEN
        RETURN '{}';
    END IF;
    n_keys := ceil(want / 4.0)::integer;
    SELECT least(greatest(coalesce(max(s.value), 1000), 1), 1000000)::integer INTO max_keys
    FROM skiplock.settings s WHERE s.name = 'claim_limited.max_keys';
    SELECT ks.after_key INTO start_key FROM skiplock.key_scans ks WHERE ks.queue = q;
    cursor_key := start_key;
    LOOP
        IF NOT wrapped THEN
            keys := skiplock._fair_keys_between(q, cursor_key, NULL, n_keys);
            IF cardinality(keys) < n_keys THEN
                -- The last key passed: round to the first, up to where this claim began.
                wrapped := true;
                IF start_key IS NOT NULL THEN
                    keys := keys || skiplock._fair_keys_between(q, NULL, start_key, n_keys - cardinality(keys));
                END IF;
            END IF;
        ELSE
            keys := skiplock._fair_keys_between(q, cursor_key, start_key, n_keys);
        END IF;
        -- The jobs without a key go round with the first keys.
        EXIT WHEN cardinality(keys) = 0 AND examined > 0;
        per_key := ceil(2.0 * (want - cardinality(picked)) / (cardinality(keys) + 1))::integer;
        WITH cand AS (
            SELECT c.id, k.i, c.rn
            FROM unnest(keys) WITH ORDINALITY AS k(k, i)
            CROSS JOIN LATERAL (
                SELECT j.id, row_number() OVER (ORDER BY j.priority, j.scheduled_at, j.id) AS rn
                FROM skiplock.jobs j
                WHERE j.state = 'available' AND j.queue = q AND j.limit_key = k.k
                  AND j.scheduled_at <= now() AND j.kind = ANY(kinds)
                ORDER BY j.priority, j.scheduled_at, j.id
                LIMIT per_key) c
            UNION ALL
            SELECT u.id, 0, row_number() OVER (ORDER BY u.priority, u.scheduled_at, u.id)
            FROM (SELECT j.id, j.priority, j.scheduled_at FROM skiplock.jobs j
                  WHERE examined = 0 AND j.state = 'available' AND j.queue = q AND j.limit_key IS NULL
                    AND j.scheduled_at <= now() AND j.kind = ANY(kinds)
                  ORDER BY j.priority, j.scheduled_at, j.id
                  LIMIT per_key) u
        )
        SELECT coalesce(array_agg(c.id ORDER BY c.rn, c.i), '{}') INTO got
        FROM (SELECT c.id, c.rn, c.i FROM cand c ORDER BY c.rn, c.i
              LIMIT want - cardinality(picked)) c;
        picked := picked || got;
        examined := examined + greatest(cardinality(keys), 1);
        EXIT WHEN cardinality(keys) = 0;
        cursor_key := keys[cardinality(keys)];
        EXIT WHEN cardinality(picked) >= want OR examined >= max_keys
               OR (wrapped AND (start_key IS NULL OR cursor_key >= start_key));
    END LOOP;
    IF cursor_key IS DISTINCT FROM start_key AND cursor_key IS NOT NULL THEN
        INSERT INTO skiplock.key_scans AS ks (queue, after_key)
        VALUES (q, cursor_key)
        ON CONFLICT ON CONSTRAINT key_scans_pkey DO UPDATE SET after_key = EXCLUDED.after_key;
    END IF;
    RETURN picked;
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
    PERFORM pg_notify(skiplock._wake_channel(), set_queue_limit.queue);
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
    PERFORM pg_notify(skiplock._wake_channel(), set_key_limit.queue);
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
    PERFORM pg_notify(skiplock._wake_channel(), pause_queue.queue);
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
    PERFORM pg_notify(skiplock._wake_channel(), resume_queue.queue);
    RETURN was;
END;
$$;

-- Per key of `keys` (of queue `q`, under a key concurrency and a rate of `step` per start
-- with burst tolerance `tau`; NULL: no such limit), at `t`: the starts its concurrency allows
-- (its limit less its running jobs, jobs_running_key_idx), the starts its rate allows now
-- (GCRA, skiplock.key_rates: the k-th start from `base` is allowed while
-- base + k * step - tau <= t, `base` being its tat, or t for a key with no row or a tat
-- passed), both at most `most`, and the least of the two (`may`).
CREATE OR REPLACE FUNCTION skiplock._key_allowances(q text, keys text[], key_concurrency integer,
                                                    step interval, tau interval, t timestamptz,
                                                    most integer)
RETURNS TABLE (k text, by_conc integer, by_rate integer, may integer, base timestamptz)
-- PL/pgSQL for its cached plan (an SQL function's query is planned at every call).
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH ks AS (
        SELECT DISTINCT u.k FROM unnest(_key_allowances.keys) AS u(k) WHERE u.k IS NOT NULL
    ), busy AS (
        SELECT j.limit_key AS k, count(*) AS running FROM skiplock.jobs j
        WHERE _key_allowances.key_concurrency IS NOT NULL AND j.state = 'running'
          AND j.queue = _key_allowances.q AND j.limit_key IS NOT NULL
        GROUP BY j.limit_key
    ), lim AS (
        SELECT ks.k,
               CASE WHEN _key_allowances.key_concurrency IS NULL THEN _key_allowances.most
                    ELSE greatest(least(_key_allowances.key_concurrency - coalesce(b.running, 0),
                                        _key_allowances.most), 0) END::integer AS by_conc,
               CASE WHEN _key_allowances.step IS NULL THEN _key_allowances.most
                    ELSE greatest(least(floor(extract(epoch FROM (_key_allowances.t + _key_allowances.tau)
                                                               - greatest(kr.tat, _key_allowances.t))
                                              / extract(epoch FROM _key_allowances.step)) + 1,
                                        _key_allowances.most), 0) END::integer AS by_rate,
               greatest(kr.tat, _key_allowances.t) AS base
        FROM ks
        LEFT JOIN busy b ON b.k = ks.k
        -- One primary-key probe per key (never a scan of the queue's rows: a queue may
        -- hold many more keys than one claim examines).
        LEFT JOIN LATERAL (SELECT r.tat FROM skiplock.key_rates r
                           WHERE _key_allowances.step IS NOT NULL
                             AND r.queue = _key_allowances.q AND r.limit_key = ks.k
                           OFFSET 0) kr ON true
    )
    SELECT lim.k, lim.by_conc, lim.by_rate, least(lim.by_conc, lim.by_rate), lim.base FROM lim;
END;
$$;

-- The earliest start a key's rate allows next among the keys that had a due job left because
-- of their rate (not of their running count, not of the claim's size): per key (`keys`, with
-- `by_conc`, `by_rate` and `base` from skiplock._key_allowances), its jobs taken (`took`: one
-- entry per job) and its due jobs looked at (`due`: likewise). NULL: no such key (or no rate).
CREATE OR REPLACE FUNCTION skiplock._key_next_start(keys text[], by_conc integer[], by_rate integer[],
                                                    base timestamptz[], took text[], due text[],
                                                    step interval, tau interval)
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN (
    WITH a AS (
        SELECT u.k, u.c, u.r, u.b FROM unnest(keys, by_conc, by_rate, base) AS u(k, c, r, b)
    ), tk AS (
        SELECT x.k, count(*) AS n FROM unnest(took) AS x(k) GROUP BY x.k
    ), du AS (
        SELECT x.k, count(*) AS n FROM unnest(due) AS x(k) GROUP BY x.k
    )
    SELECT min(a.b + coalesce(tk.n, 0) * step - tau)
    FROM a JOIN du ON du.k = a.k LEFT JOIN tk ON tk.k = a.k
    WHERE step IS NOT NULL AND du.n > coalesce(tk.n, 0)
      AND coalesce(tk.n, 0) >= a.r AND coalesce(tk.n, 0) < a.c);
END;
$$;

-- When the next available job of queue `q` not yet due becomes due (NULL: none): the
-- earliest sleeping lane's time, and each awake lane's first job after now (at most
-- skiplock._claim_max_lanes lanes; a sleeping lane whose time has come counts as awake, and
-- the maintenance wakes it). One probe per lane.
CREATE OR REPLACE FUNCTION skiplock._next_due(q text) RETURNS timestamptz
SET enable_seqscan = off
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT min(x.t) FROM (
            (SELECT l.due_at AS t FROM skiplock.lanes l
             WHERE l.queue = q AND l.due_at > now() ORDER BY l.due_at LIMIT 1)
            UNION ALL
            SELECT (SELECT j.scheduled_at FROM skiplock.jobs j
                    WHERE j.state = 'available' AND j.queue = q AND j.priority = a.p AND j.scheduled_at > now()
                    ORDER BY j.scheduled_at LIMIT 1)
            FROM (SELECT DISTINCT l.priority AS p FROM skiplock.lanes l
                  WHERE l.queue = q AND l.due_at IS NULL
                  ORDER BY 1 LIMIT skiplock._claim_max_lanes()) a
        ) x);
END;
$$;

-- The claim of a controlled queue (one with a row in skiplock.queues). Returns the claimed
-- jobs (the columns of sql/queue/claim.sql) and always one extra row with id NULL that says
-- whether the queue is still controlled (false: use the plain claim again), the earliest
-- time a job skipped for a key's rate becomes allowed (NULL: none, or unknown: a running job
-- must finish first; the claim's own clock when keys are left for the next claim to examine,
-- below) and how many jobs the queue let this claim buffer at most (`buffer_room`, below;
-- NULL: no bound). Every column repeats those three.
--
-- Limited claims of one queue are serialized by the lock on its row; every later statement
-- of this (volatile) function takes a fresh snapshot, so the running jobs counted include
-- those the previous claimer committed. Jobs that may not start are not touched: they spend
-- no attempt and no worker slot. A job without limit_key is never held back by a key's
-- limits, only by the queue's concurrency.
--
-- Under a key's limits the pick is one set query over the keys, not a scan of the queue's
-- jobs in order (keys blocked at the head of the queue froze a scan that had to step over
-- their jobs; tests/limits.rs `blocked_keys_at_the_head_of_a_queue_hold_back_nothing_else`):
-- the keys with available jobs, walked with a loose index scan of jobs_key_claim_idx
-- (migrations/history/0012_claim_limited.sql), each with its allowance (its key concurrency less its
-- running jobs, read through jobs_running_key_idx; the starts its rate allows now, from its
-- GCRA state in skiplock.key_rates: a start while tat - tau <= t, each start moving tat on by
-- one step), each giving at most that many of its first due jobs; with the first due jobs
-- without a key, the first `free` of them in claim order (priority, scheduled_at, id) are
-- claimed. One claim examines at most `claim_limited.max_keys` keys (skiplock.settings,
-- 1000): a queue with more has its walk resume after the last key examined at its next claim
-- (skiplock.key_scans), and the claim reports its own clock as `wait_until`, so the worker
-- claims again at once rather than at its next poll; once the walk reaches the last key, it
-- reports the earliest rate-allowed start of the whole walk and the next one begins at the
-- first key. So a claim's work is bounded by that number of keys (each one index probe for
-- the walk, one for its first jobs, one in key_rates), and no key waits more than
-- (keys / max_keys) claims to be examined.
--
-- A row whose attempt counter is at its maximum (2147483647; only a trusted role can write
-- one) cannot be counted once more: it is discarded with the reason in its errors instead of
-- failing the whole claim (as in sql/queue/claim.sql).
--
-- `n` jobs are for the worker's free slots; `ahead` more may go into its buffer (claim-ahead,
-- SQL API 6), but only in a queue whose one limit is its concurrency (a key's rate counts a
-- start at the claim, and a buffered job would hold a key's slot without running), and only
-- half of the room the limit leaves after the free slots: a buffered job counts as running, so
-- the limit holds, and while it binds the buffers stay empty and the room goes to slots that
-- can start a job now (another worker's, too).
--
-- Lanes (API 8): under a concurrency limit alone, the pick reads each lane of the queue from
-- the worker's bound (skiplock._claim_lanes), and the row with id NULL carries the claim's
-- clock in `attempted_at` and the lanes read to their end in `exhausted`, as skiplock._claim's
-- does. The pick under a key's limits reads the queue from its start (it weighs each key's
-- first jobs, wherever they are), and reports no clock: the worker's bounds stay as they were.
DROP FUNCTION IF EXISTS skiplock._claim_limited(text, text[], integer, text);
DROP FUNCTION IF EXISTS skiplock._claim_limited(text, text[], integer, text, integer);
DROP FUNCTION IF EXISTS skiplock._claim_limited(text, text[], integer, text, integer, smallint[], timestamptz[]);
CREATE OR REPLACE FUNCTION skiplock._claim_limited(q text, kinds text[], n integer, worker text,
                                                   ahead integer DEFAULT 0,
                                                   lane_priority smallint[] DEFAULT NULL,
                                                   lane_since timestamptz[] DEFAULT NULL,
                                                   after_lane smallint DEFAULT NULL)
RETURNS TABLE (id bigint, kind text, queue text, args jsonb, priority smallint, attempt integer,
               max_attempts integer, scheduled_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, tags text[], meta jsonb, controlled boolean,
               wait_until timestamptz, buffer_room integer, exhausted smallint[],
               lanes_after smallint)
-- See skiplock._claim: plans kept from the function's first calls must not scan the table.
SET enable_seqscan = off
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
    next_at timestamptz;
    k_count integer;
    step interval;
    tau interval;
    t timestamptz;
    -- The walk over the keys (see above).
    max_keys integer;
    scan skiplock.key_scans;
    keys text[];
    more boolean;
    head_rows integer;
    head_keys text[];
    walk_keys text[];
    free_b integer;
    per_key integer;
    cut boolean;
    -- The pick went lane by lane (see above): its clock and the lanes it read to their end.
    clock timestamptz;
    -- The pick was a fair queue's (skiplock._fair_pick).
    fair_pick boolean := false;
    -- The picked jobs whose start the claim writes (below).
    started bigint[];
    read_out smallint[];
    more_after smallint;
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

    IF is_controlled AND NOT ctl.paused AND ctl.key_concurrency IS NULL AND ctl.key_rate IS NULL
       AND NOT ctl.fair THEN
        clock := now();
        read_out := '{}';
    END IF;
    IF free > 0 AND ctl.fair AND ctl.key_concurrency IS NULL AND ctl.key_rate IS NULL THEN
        -- Fair mode: round-robin over the keys, not lane by lane (no clock: the worker's lane
        -- bounds stay as they were). Its jobs' starts are the worker's to note (below).
        picked := skiplock._fair_pick(q, kinds, free);
        fair_pick := true;
    ELSIF free > 0 AND ctl.key_concurrency IS NULL AND ctl.key_rate IS NULL THEN
        SELECT p.ids, p.read_out, p.more_after INTO picked, read_out, more_after
        FROM skiplock._claim_lanes(q, kinds, free, lane_priority, lane_since, after_lane) p;
    ELSIF free > 0 THEN
        IF ctl.key_rate IS NOT NULL THEN
            step := ctl.key_period / ctl.key_rate;
            tau := ctl.key_period - step;
        END IF;
        -- 1. The head of the queue in claim order (when the limits leave room, the whole
        --    answer): each key's first rows of the head, as many as its allowance.
        head_rows := least(greatest(free + free / 4, 100), 1000);
        WITH head AS (
            SELECT j.id, j.limit_key AS k, j.priority, j.scheduled_at FROM skiplock.jobs j
            WHERE j.state = 'available' AND j.queue = q AND j.scheduled_at <= now()
              AND j.kind = ANY(kinds)
            ORDER BY j.priority, j.scheduled_at, j.id
            LIMIT head_rows
        ), allowed AS (
            SELECT a.* FROM skiplock._key_allowances(q, ARRAY(SELECT DISTINCT h.k FROM head h),
                                                     ctl.key_concurrency, step, tau, t, free) a
        ), ranked AS (
            SELECT h.*, row_number() OVER (PARTITION BY h.k ORDER BY h.priority, h.scheduled_at, h.id) AS rn
            FROM head h
        ), chosen AS (
            SELECT r.id, r.k FROM ranked r LEFT JOIN allowed a ON a.k = r.k
            WHERE r.k IS NULL OR r.rn <= a.may
            ORDER BY r.priority, r.scheduled_at, r.id
            LIMIT free
        )
        SELECT (SELECT count(*) FROM head),
               ARRAY(SELECT DISTINCT h.k FROM head h WHERE h.k IS NOT NULL),
               (SELECT coalesce(array_agg(ch.id), '{}') FROM chosen ch),
               skiplock._key_next_start(
                   ARRAY(SELECT a.k FROM allowed a), ARRAY(SELECT a.by_conc FROM allowed a),
                   ARRAY(SELECT a.by_rate FROM allowed a), ARRAY(SELECT a.base FROM allowed a),
                   ARRAY(SELECT ch.k FROM chosen ch WHERE ch.k IS NOT NULL),
                   ARRAY(SELECT h.k FROM head h WHERE h.k IS NOT NULL), step, tau)
        INTO k_count, head_keys, picked, next_at;

        -- 2. The head was not all the queue's due work, and its keys' limits left slots
        --    unfilled: the pick over the keys (see above) for the rest, among the keys the
        --    head did not hold (its keys' jobs beyond it come later in claim order than every
        --    job of the head, as do the jobs without a key it did not hold).
        IF k_count >= head_rows AND cardinality(picked) < free THEN
            free_b := free - cardinality(picked);
            SELECT least(greatest(coalesce(max(s.value), 250), 1), 1000000)::integer INTO max_keys
            FROM skiplock.settings s WHERE s.name = 'claim_limited.max_keys';
            SELECT * INTO scan FROM skiplock.key_scans ks WHERE ks.queue = q;
            -- The keys to examine: up to max_keys + 1 (one more tells whether keys are
            -- left), after the last one the previous claim examined, else from the first.
            keys := skiplock._keys_between(q, scan.after_key, NULL, max_keys + 1);
            more := cardinality(keys) > max_keys;
            keys := keys[1:max_keys];
            -- The head's keys were weighed above.
            walk_keys := ARRAY(SELECT unnest(keys) EXCEPT SELECT unnest(head_keys));
            -- Each key gives at most its share of the claim (and one more row, to tell
            -- whether a job was left): the rows read stay near free + 2 * keys.
            per_key := ceil(free_b::numeric / greatest(cardinality(walk_keys), 1))::integer;

            WITH allowed AS (
                SELECT a.* FROM skiplock._key_allowances(q, walk_keys, ctl.key_concurrency, step, tau, t, free_b) a
            ), cand AS (
                SELECT c.id, c.priority, c.scheduled_at, a.k, c.rn, a.may
                FROM allowed a
                CROSS JOIN LATERAL (
                    SELECT j.id, j.priority, j.scheduled_at,
                           row_number() OVER (ORDER BY j.priority, j.scheduled_at, j.id) AS rn
                    FROM skiplock.jobs j
                    WHERE j.state = 'available' AND j.queue = q AND j.limit_key = a.k
                      AND j.scheduled_at <= now() AND j.kind = ANY(kinds)
                    ORDER BY j.priority, j.scheduled_at, j.id
                    -- A key its running count blocks needs no look (it names no time).
                    LIMIT CASE WHEN a.by_conc = 0 THEN 0 ELSE least(a.may, per_key) + 1 END) c
                UNION ALL
                SELECT j.id, j.priority, j.scheduled_at, NULL, 1, 1
                FROM (SELECT j.id, j.priority, j.scheduled_at FROM skiplock.jobs j
                      WHERE j.state = 'available' AND j.queue = q AND j.limit_key IS NULL
                        AND j.scheduled_at <= now() AND j.kind = ANY(kinds)
                      ORDER BY j.priority, j.scheduled_at, j.id
                      LIMIT free) j
                WHERE j.id NOT IN (SELECT unnest(picked))
            ), chosen AS (
                SELECT c.id, c.k FROM cand c WHERE c.rn <= c.may
                ORDER BY c.priority, c.scheduled_at, c.id
                LIMIT free_b
            )
            SELECT picked || (SELECT coalesce(array_agg(ch.id), '{}') FROM chosen ch),
                   least(next_at,
                   skiplock._key_next_start(
                       ARRAY(SELECT a.k FROM allowed a), ARRAY(SELECT a.by_conc FROM allowed a),
                       ARRAY(SELECT a.by_rate FROM allowed a), ARRAY(SELECT a.base FROM allowed a),
                       ARRAY(SELECT ch.k FROM chosen ch WHERE ch.k IS NOT NULL),
                       ARRAY(SELECT c.k FROM cand c WHERE c.k IS NOT NULL), step, tau)),
                   -- A key's share cut off jobs its limits allowed.
                   EXISTS (SELECT 1 FROM cand c WHERE c.k IS NOT NULL AND c.rn > per_key AND c.rn <= c.may)
            INTO picked, next_at, cut;

            IF more THEN
                INSERT INTO skiplock.key_scans AS ks (queue, after_key, wait_until)
                VALUES (q, keys[max_keys], next_at)
                ON CONFLICT ON CONSTRAINT key_scans_pkey
                DO UPDATE SET after_key = EXCLUDED.after_key,
                              wait_until = least(ks.wait_until, EXCLUDED.wait_until);
            ELSIF scan.queue IS NOT NULL THEN
                DELETE FROM skiplock.key_scans ks WHERE ks.queue = q;
                next_at := least(next_at, scan.wait_until);
            END IF;
            IF more OR (cut AND cardinality(picked) < free) THEN
                -- Keys are left unexamined, or with jobs their share left out: the worker
                -- claims again at once rather than at its next poll.
                next_at := t;
            END IF;
        END IF;
        -- The due jobs left wait for their keys' rates until next_at: the worker sleeps until
        -- then (src/worker/producer/policy.rs, limit_nap) instead of reading every key again at each
        -- poll, so the answer names the next job that becomes due as well, if it comes first.
        IF next_at > t THEN
            next_at := least(next_at, skiplock._next_due(q));
        END IF;
    END IF;

    IF cardinality(picked) > 0 THEN
        -- The first n start at once; a fair pick's order is not the order the worker starts its
        -- jobs in, so it writes none (the worker does: src/worker/buffer.rs).
        started := CASE WHEN fair_pick THEN '{}' ELSE picked[1:greatest(coalesce(n, 0), 0)] END;
        RETURN QUERY
        WITH locked AS (
            SELECT j.id FROM skiplock.jobs j
            WHERE j.id = ANY(picked) AND j.state = 'available'
            FOR NO KEY UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE skiplock.jobs j
            SET state = CASE WHEN j.attempt < 2147483647 THEN 'running'
                             ELSE 'discarded' END::skiplock.job_state,
                attempt = least(j.attempt, 2147483646) + 1,
                -- The start the key rates counted (see t above); NULL for a job claimed ahead
                -- into the worker's buffer (skiplock._claim: its start is reported later).
                attempted_at = CASE WHEN j.id = ANY (started) THEN t END,
                attempted_by = worker,
                heartbeat_at = now(),
                finalized_at = CASE WHEN j.attempt < 2147483647 THEN j.finalized_at ELSE now() END,
                errors = CASE WHEN j.attempt < 2147483647 THEN j.errors
                              ELSE j.errors || jsonb_build_array(jsonb_build_object(
                                  'attempt', j.attempt, 'at', now(),
                                  'error', 'discarded at claim: its attempt counter is at its maximum (2147483647) and cannot count another attempt'))
                         END
            FROM locked
            WHERE j.id = locked.id
            RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
                      j.scheduled_at, j.created_at, j.attempted_at, j.tags, j.meta, j.limit_key, j.state
        ), rated AS (
            -- Each key's starts move its GCRA state on by one step each (see above).
            INSERT INTO skiplock.key_rates AS kr (queue, limit_key, tat)
            SELECT q, c.limit_key, t + count(*) * step
            FROM claimed c
            WHERE ctl.key_rate IS NOT NULL AND c.state = 'running' AND c.limit_key IS NOT NULL
            GROUP BY c.limit_key
            ON CONFLICT ON CONSTRAINT key_rates_pkey
            DO UPDATE SET tat = greatest(kr.tat, t) + (EXCLUDED.tat - t)
        )
        SELECT c.id, c.kind, c.queue, c.args, c.priority, c.attempt, c.max_attempts,
               c.scheduled_at, c.created_at, c.attempted_at, c.tags, c.meta, true, next_at, room,
               NULL::smallint[], NULL::smallint
        FROM claimed c WHERE c.state = 'running';
    END IF;
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::smallint,
        NULL::integer, NULL::integer, NULL::timestamptz, NULL::timestamptz, clock, NULL::text[],
        NULL::jsonb, is_controlled, next_at, room, read_out, more_after;
END;
$$;

-- The queues with control settings or jobs: limits, paused, and counts (skiplock queue list).
CREATE OR REPLACE VIEW skiplock.queue_control AS
SELECT coalesce(c.queue, s.queue) AS queue,
       coalesce(c.paused, false) AS paused,
       c.concurrency, c.key_concurrency, c.key_rate, c.key_period,
       coalesce(s.available, 0) AS available,
       coalesce(s.running, 0) AS running,
       coalesce(c.fair, false) AS fair
FROM skiplock.queues c
FULL JOIN (SELECT j.queue,
                  count(*) FILTER (WHERE j.state = 'available') AS available,
                  count(*) FILTER (WHERE j.state = 'running') AS running
           FROM skiplock.jobs j WHERE j.state IN ('available', 'running')
           GROUP BY j.queue) s ON s.queue = c.queue;
