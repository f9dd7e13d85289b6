-- skiplock core SQL API: the wake-ups an insert sends (the wake channel, the lanes a claim needs, the insert trigger).
-- Installed (CREATE OR REPLACE) by `skiplock migrate` after the schema migrations, in the order of
-- src/store/schema.rs (api_files).


-- The channel every wake-up is sent on (migrations/history/0015_wake_channel.sql): a secret of the
-- owner and the worker role, so a login without skiplock's grants that LISTENs learns no
-- queue name (docs/security.md, "Wake-ups"). One inlined read of a one-row table; a deleted
-- row falls back to the old fixed name rather than failing every enqueue.
CREATE OR REPLACE FUNCTION skiplock._wake_channel() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT w.channel FROM skiplock.wake_channel w), 'skiplock_wake')
$$;

-- The lanes (skiplock.lanes: a queue's priorities) and the fair queues' key lanes
-- (skiplock.key_lanes) that jobs just made available need (migrations/core/0011_sleeping_lanes.sql):
-- per lane of `queues[i]` and `priorities[i]` (and per key `keys[i]` of a fair queue), the
-- earliest of its jobs' `times[i]`. A lane with a row a claim will read by then (not pending,
-- awake or due by then) needs nothing: one probe of its index, no write. Otherwise the caller
-- adds a row of its own (awake, or asleep until that time), which becomes visible with its
-- jobs, and never waits for another transaction. Every statement that makes a job available
-- or moves one earlier calls it, after writing the jobs (the maintenance waits for such
-- writers before it changes a row one of them may rely on: skiplock._lanes_settle).
CREATE OR REPLACE FUNCTION skiplock._lanes_need(queues text[], priorities smallint[], keys text[],
                                                times timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    one_q text;
    one_p smallint;
    one_k text;
    one_t timestamptz;
BEGIN
    -- One job (every single enqueue): the same, without the sets. The set form's grouping
    -- cost a single enqueue about 80 µs; this one probe costs about 10.
    IF cardinality(queues) = 1 THEN
        one_q := queues[1];
        one_p := priorities[1];
        one_k := keys[1];
        one_t := times[1];
        IF NOT EXISTS (SELECT 1 FROM skiplock.lanes l
                       WHERE l.queue = one_q AND l.priority = one_p AND NOT l.pending
                         AND (l.due_at IS NULL OR l.due_at <= greatest(one_t, now()))) THEN
            INSERT INTO skiplock.lanes (queue, priority, due_at)
            VALUES (one_q, one_p, CASE WHEN one_t <= now() THEN NULL ELSE skiplock._time_clamp(one_t) END);
        END IF;
        IF one_k > '' AND EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = one_q AND c.fair)
           AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                           WHERE l.queue = one_q AND l.limit_key = one_k AND NOT l.pending
                             AND (l.due_at IS NULL OR l.due_at <= greatest(one_t, now()))) THEN
            INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
            VALUES (one_q, one_k, CASE WHEN one_t <= now() THEN NULL ELSE skiplock._time_clamp(one_t) END);
        END IF;
        RETURN;
    END IF;
    INSERT INTO skiplock.lanes (queue, priority, due_at)
    SELECT n.q, n.p, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
    FROM (SELECT u.q, u.p, min(u.t) AS t FROM unnest(queues, priorities, times) AS u(q, p, t)
          GROUP BY u.q, u.p) n
    WHERE NOT EXISTS (SELECT 1 FROM skiplock.lanes l
                      WHERE l.queue = n.q AND l.priority = n.p AND NOT l.pending
                        AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    IF EXISTS (SELECT 1 FROM unnest(keys) AS k WHERE k > '') THEN
        INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
        SELECT n.q, n.k, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
        -- No '' key: the API refuses it, and a row written past it must not fail the
        -- statement (an ack batch, a whole insert) for every other row.
        FROM (SELECT u.q, u.k, min(u.t) AS t FROM unnest(queues, keys, times) AS u(q, k, t)
              WHERE u.k > '' GROUP BY u.q, u.k) n
        WHERE EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = n.q AND c.fair)
          AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                          WHERE l.queue = n.q AND l.limit_key = n.k AND NOT l.pending
                            AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    END IF;
END;
$$;

-- Wake idle workers once per statement (not per row) for every queue that got a job due now
-- and that some producer waits on (skiplock.waiting; '' stands for every queue): a commit
-- that notified takes a server-wide lock, so notifying nobody would serialise every
-- enqueue's commit for nothing. A statement trigger covers skiplock.enqueue, enqueue_many and
-- plain INSERTs from psql alike; owner's rights, so an inserting role needs no access to
-- skiplock.waiting.
--
-- The same trigger registers the lanes of the statement's available jobs, as
-- skiplock._lanes_need does (its rule, written out here: calling it cost every insert about
-- 7 µs more): one index probe per lane of the statement, which writes nothing when the lane
-- has a row to rely on, and the fair queues' key lanes only for a statement with keyed jobs.
-- A job inserted `waiting` gets its lane when it is released (sql/api/12_flows.sql).
CREATE OR REPLACE FUNCTION skiplock._notify_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    adm record;
    lim record;
    waiting bigint;
BEGIN
    -- Admission control (skiplock.set_queue_admission, sql/api/15_control.sql; docs/operations.md,
    -- "Admission control"): nothing but this read of an empty table while no queue has a
    -- limit. A limited queue's enqueues take its transaction-level advisory lock (so two
    -- producers cannot both see room for one job) and read its row afresh (READ COMMITTED: a
    -- new snapshot after the lock sees what the lock's previous holder committed).
    --
    -- `admitted` is an upper bound of the queue's available jobs that inserts made (the last
    -- exact count plus what was admitted since; migrations/core/0017_admission_counter.sql):
    -- while it plus the statement's jobs stays within max_waiting and the count is at most a
    -- second old, the statement is admitted by adding to it, with no scan. Otherwise (past the
    -- limit by the bound, a count older than a second, or no count yet) the statement counts
    -- the queue's available jobs exactly, at most max_waiting + its own + 1 index entries of
    -- jobs_claim_idx, stores that count, and past the limit is refused whole (SK429) with the
    -- exact count in the message. Claims and cancels only make the bound too high, which
    -- makes a count happen sooner, never an admission past the limit; jobs made available
    -- again without an insert (retries, rescues, released dependencies) are seen by the next
    -- count, at most a second later (tests/admission.rs).
    IF EXISTS (SELECT 1 FROM skiplock.queue_admission) THEN
        FOR adm IN
            SELECT a.queue, n.added
            FROM (SELECT r.queue, count(*) AS added FROM new_rows r
                  WHERE r.state = 'available' GROUP BY r.queue) n
            JOIN skiplock.queue_admission a ON a.queue = n.queue
            ORDER BY a.queue
        LOOP
            PERFORM pg_advisory_xact_lock(hashtext('skiplock.queue_admission'), hashtext(adm.queue));
            SELECT a.max_waiting, a.admitted, a.counted_at INTO lim
            FROM skiplock.queue_admission a WHERE a.queue = adm.queue;
            IF NOT FOUND THEN
                CONTINUE;  -- the limit was removed meanwhile
            END IF;
            IF lim.admitted IS NOT NULL AND lim.admitted + adm.added <= lim.max_waiting
               AND lim.counted_at >= clock_timestamp() - interval '1 second' THEN
                UPDATE skiplock.queue_admission a SET admitted = lim.admitted + adm.added
                WHERE a.queue = adm.queue;
                CONTINUE;
            END IF;
            SELECT count(*) INTO waiting
            FROM (SELECT 1 FROM skiplock.jobs j
                  WHERE j.queue = adm.queue AND j.state = 'available'
                  LIMIT lim.max_waiting::bigint + adm.added + 1) w;
            IF waiting > lim.max_waiting THEN
                RAISE EXCEPTION 'skiplock: queue % is full: % jobs wait and its limit is % (max_waiting); % more refused',
                    quote_literal(adm.queue), waiting - adm.added, lim.max_waiting, adm.added
                    USING ERRCODE = 'SK429',
                          HINT = 'wait for the workers to drain it, or raise the limit with skiplock.set_queue_admission';
            END IF;
            UPDATE skiplock.queue_admission a SET admitted = waiting, counted_at = clock_timestamp()
            WHERE a.queue = adm.queue;
        END LOOP;
    END IF;
    INSERT INTO skiplock.lanes (queue, priority, due_at)
    SELECT n.queue, n.priority, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
    FROM (SELECT r.queue, r.priority, min(r.scheduled_at) AS t FROM new_rows r
          WHERE r.state = 'available' GROUP BY r.queue, r.priority) n
    WHERE NOT EXISTS (SELECT 1 FROM skiplock.lanes l
                      WHERE l.queue = n.queue AND l.priority = n.priority AND NOT l.pending
                        AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    IF EXISTS (SELECT 1 FROM new_rows r WHERE r.state = 'available' AND r.limit_key > '') THEN
        INSERT INTO skiplock.key_lanes (queue, limit_key, due_at)
        SELECT n.queue, n.limit_key, CASE WHEN n.t <= now() THEN NULL ELSE skiplock._time_clamp(n.t) END
        FROM (SELECT r.queue, r.limit_key, min(r.scheduled_at) AS t FROM new_rows r
              WHERE r.state = 'available' AND r.limit_key > '' GROUP BY r.queue, r.limit_key) n
        WHERE EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = n.queue AND c.fair)
          AND NOT EXISTS (SELECT 1 FROM skiplock.key_lanes l
                          WHERE l.queue = n.queue AND l.limit_key = n.limit_key AND NOT l.pending
                            AND (l.due_at IS NULL OR l.due_at <= greatest(n.t, now())));
    END IF;
    PERFORM pg_notify(skiplock._wake_channel(), q.queue)
    FROM (SELECT DISTINCT n.queue FROM new_rows n
          WHERE n.state = 'available' AND n.scheduled_at <= now()) AS q
    WHERE EXISTS (SELECT 1 FROM skiplock.waiting w WHERE w.queue IN (q.queue, ''));
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_notify_insert ON skiplock.jobs;
CREATE TRIGGER jobs_notify_insert AFTER INSERT ON skiplock.jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION skiplock._notify_inserted();

-- A keyed job going back to `available` (retry, snooze, rescue, shutdown) while another
-- available job already holds its unique_key is cancelled, superseded by the holder, by the
-- statements that send jobs back (sql/queue/ack_many.sql, rescue.sql, release_unstarted.sql;
-- skiplock.retry refuses it, retry_jobs skips it). Earlier versions did this in a BEFORE UPDATE
-- row trigger, which made Postgres lock and WAL-log every row of every claim, ack and
-- heartbeat before updating it (docs/internals.md): dropped here. A plain UPDATE from psql that would
-- put a second available job on a key fails on the unique index and changes nothing.
DROP TRIGGER IF EXISTS jobs_requeue_unique ON skiplock.jobs;
DROP FUNCTION IF EXISTS skiplock._supersede_requeued();
