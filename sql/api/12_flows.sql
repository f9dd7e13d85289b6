-- Flows (docs/flows.md): jobs that wait for other jobs. A job enqueued with `depends_on` is
-- inserted `waiting` (outside every claim index: the claim never sees it), with one row of
-- skiplock.job_dependencies per dependency and one of skiplock.job_waits counting those still
-- to come (migrations/core/0008_flows.sql). When a dependency finishes, skiplock._settle
-- resolves its edges, decrements its dependents' counts and releases each that reaches zero
-- (`available`, due now) or cancels it when the dependency failed; skiplock._revive undoes
-- that when a failed job is retried.

-- Refuses a call that would write more dependency edges than the limit
-- `depends_on.max_edges` (skiplock.settings, 100,000): `jobs` new jobs, each waiting for
-- every job of `depends_on` (duplicates count once). Each factor has its own cap
-- (`enqueue_many.max_rows`), their product had none: one call wrote 3,000,000 edges
-- (docs/security.md, "Flows between tenants"). skiplock._add_dependencies checks its own
-- call; skiplock.enqueue_many and skiplock.enqueue_flow check the whole call first, as they
-- may enqueue its jobs one by one.
CREATE OR REPLACE FUNCTION skiplock._check_edges(jobs bigint, depends_on bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    deps bigint;
BEGIN
    IF coalesce(jobs, 0) = 0 OR coalesce(cardinality(depends_on), 0) = 0 THEN
        RETURN;
    END IF;
    SELECT count(DISTINCT d) INTO deps FROM unnest(depends_on) AS d;
    PERFORM skiplock._check_edge_count(jobs * deps,
        format('%s jobs, each waiting for %s', jobs, deps));
END;
$$;

-- Refuses `edges` dependency edges in one call when they are more than
-- `depends_on.max_edges`; `what` says where they come from, for the message.
CREATE OR REPLACE FUNCTION skiplock._check_edge_count(edges bigint, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF edges > skiplock._limit('depends_on.max_edges') THEN
        RAISE EXCEPTION 'skiplock: the call would write % dependency edges (%; at most % per call, setting depends_on.max_edges)',
            edges, what, skiplock._limit('depends_on.max_edges') USING ERRCODE = '22023';
    END IF;
END;
$$;

-- The dependencies of new jobs `job_ids` (their own rows are still being written by the
-- caller's statement): every one of them waits for every job of `depends_on`, so a fan-out of
-- `enqueue_many` checks the dependencies once, not once per job. `on_failure`: 'cancel' (the
-- default) or 'run'. The 3-argument form of one job is dropped.
--
-- The caller's transaction is the enqueuer's, and may stay open for as long as it likes: it
-- must hold no lock a worker needs (docs/security.md, "Flows between tenants"). The
-- dependencies are locked FOR KEY SHARE, which only keeps their rows from being deleted until
-- the edges commit (retention skips a locked row): it conflicts with no UPDATE of a job, as
-- none changes a column of a unique index without a predicate (the id is the only one), so
-- the heartbeat, the ack, cancel and reschedule go on, and the claim, which picks FOR NO KEY
-- UPDATE, still takes a due job. Only the caller's own rows are written: a dependency that
-- has finished has the new edges settled here (only them: another transaction's edges and its
-- watchers are the ack's and the sweep's), and nothing else is locked.
--
-- Why that is enough. A job finishing while these edges are not yet committed is settled by
-- a statement that cannot see them, and this statement may not see it finish either (it had
-- not committed when the states were read below). So for every dependency not finished here,
-- and not written by this transaction (no other can finish a row this one wrote until it
-- commits, and then sees the edges), a hint goes to the workers on the settle channel
-- (skiplock._settle_channel; at most 300 ids a transaction), sent by Postgres once this
-- transaction has committed: a worker that hears it settles those jobs' edges if they have
-- finished by then (skiplock._settle_added, which skips, for the worker to try again, a job
-- another transaction is still writing). Without a listening worker, the maintenance's sweep
-- settles them (skiplock.settle_dependencies). Tests: tests/hardening_sql.rs,
-- an_enqueuers_open_transaction_with_depends_on_stalls_no_worker_and_runs_no_job_twice;
-- tests/flows.rs,
-- a_dependency_finishing_while_its_dependent_is_enqueued_is_settled_once_the_enqueue_commits.
DROP FUNCTION IF EXISTS skiplock._add_dependencies(bigint, bigint[], text);
CREATE OR REPLACE FUNCTION skiplock._add_dependencies(job_ids bigint[], depends_on bigint[], on_failure text)
RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    deps bigint[];
    missing bigint;
    finished bigint[];
    open bigint[];
    mine tid[];
    hinted integer;
BEGIN
    IF coalesce(on_failure, 'cancel') NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'skiplock: on_dependency_failure must be ''cancel'' or ''run'', got %',
            quote_nullable(on_failure) USING ERRCODE = '22023';
    END IF;
    IF array_position(depends_on, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: depends_on holds a NULL id' USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(DISTINCT d ORDER BY d) INTO deps FROM unnest(depends_on) AS d;
    IF cardinality(deps) > skiplock._limit('enqueue_many.max_rows') THEN
        RAISE EXCEPTION 'skiplock: depends_on names % jobs (at most %, setting enqueue_many.max_rows)',
            cardinality(deps), skiplock._limit('enqueue_many.max_rows') USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock._check_edge_count(cardinality(job_ids)::bigint * cardinality(deps),
        format('%s jobs, each waiting for %s', cardinality(job_ids), cardinality(deps)));
    PERFORM 1 FROM skiplock.jobs j WHERE j.id = ANY (deps) ORDER BY j.id FOR KEY SHARE;
    SELECT min(d) INTO missing FROM unnest(deps) AS d
    WHERE NOT EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.id = d);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: depends_on names job %, which does not exist', missing
            USING ERRCODE = '23503';
    END IF;
    INSERT INTO skiplock.job_dependencies (job_id, depends_on, sole)
    SELECT n, d, cardinality(deps) = 1 FROM unnest(job_ids) AS n, unnest(deps) AS d;
    INSERT INTO skiplock.job_waits (job_id, pending, on_dependency_failure)
    SELECT n, cardinality(deps), coalesce(on_failure, 'cancel') FROM unnest(job_ids) AS n;
    SELECT array_agg(j.id) FILTER (WHERE j.state IN ('completed', 'discarded', 'cancelled')),
           array_agg(j.id ORDER BY j.id) FILTER (WHERE j.state NOT IN ('completed', 'discarded', 'cancelled')
                                                 AND j.xmin <> pg_current_xact_id()::xid)
    INTO finished, open
    FROM skiplock.jobs j WHERE j.id = ANY (deps);
    IF finished IS NOT NULL THEN
        SELECT array_agg(d.ctid) INTO mine FROM skiplock.job_dependencies d
        WHERE d.job_id = ANY (job_ids) AND d.depends_on = ANY (finished);
        PERFORM skiplock._settle_edges(finished, cardinality(mine), mine);
    END IF;
    -- At most 300 ids hinted a transaction, over all its calls (a payload holds 8,000 bytes,
    -- and every listening worker runs a statement for each hint: an enqueue naming 100,000
    -- running jobs would otherwise cost each worker 100,000 row locks). A dependency past
    -- them that finishes before the transaction commits waits for the sweep.
    hinted := CASE WHEN coalesce(current_setting('skiplock.hinted_ids', true), '') = '' THEN 0
                   WHEN current_setting('skiplock.hinted_ids', true) ~ '^[0-9]{1,9}$'
                   THEN current_setting('skiplock.hinted_ids', true)::integer
                   ELSE 300 END;
    IF open IS NOT NULL AND hinted < 300 THEN
        open := open[1:300 - hinted];
        PERFORM pg_notify(skiplock._settle_channel(), array_to_string(open, ' '));
        PERFORM set_config('skiplock.hinted_ids', (hinted + cardinality(open))::text, true);
    END IF;
END;
$$;

-- The channel of the settle hints skiplock._add_dependencies sends (the wake channel's name
-- with '_settle': as secret, and heard by the same workers, src/worker/listener.rs).
CREATE OR REPLACE FUNCTION skiplock._settle_channel() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT skiplock._wake_channel() || '_settle'
$$;

-- What a worker does with a settle hint (src/worker/listener.rs): the jobs `deps` got new
-- edges from a transaction that has committed, and had not finished when it read them
-- (skiplock._add_dependencies says why an ack may have missed those edges). The edges of
-- each that has finished now are settled, at most `max_edges` of them in this statement,
-- as an ack settles them (skiplock._settle_edges). The jobs are read without a lock: any
-- enqueuer sends hints (300 ids a transaction, to every listening worker), and a share lock
-- taken here on a running job made its heartbeat and its ack wait for the hint's statement
-- (tests/flows.rs, a_settle_hint_locks_no_job_a_worker_writes). A job not finished as read
-- now may be running, or finishing in a transaction not yet committed (the ack that missed
-- the edges): such jobs come back as `busy`, for the caller to read again a moment later
-- (src/worker/acks.rs, a few times, then the maintenance's sweep's); `left_over`: jobs whose
-- edges the statement may not all have settled (the worker settles them in slices). A hint
-- is only a hint: any ids, bounded work. Planned as skiplock._settle_edges.
CREATE OR REPLACE FUNCTION skiplock._settle_added(deps bigint[], max_edges integer,
                                                  OUT busy bigint[], OUT left_over bigint[])
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    finished bigint[];
BEGIN
    IF max_edges IS NULL OR max_edges < 1 THEN
        RAISE EXCEPTION 'skiplock: _settle_added needs a slice of at least one edge' USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(j.id ORDER BY j.id) FILTER (WHERE j.state IN ('completed', 'discarded', 'cancelled')),
           array_agg(j.id ORDER BY j.id) FILTER (WHERE j.state NOT IN ('completed', 'discarded', 'cancelled'))
    INTO finished, busy
    FROM skiplock.jobs j WHERE j.id = ANY (deps);
    IF finished IS NOT NULL
       AND EXISTS (SELECT 1 FROM skiplock.job_dependencies d
                   WHERE d.depends_on = ANY (finished) AND d.resolved IS NULL) THEN
        SELECT s.left_over INTO left_over FROM skiplock._settle_edges(finished, max_edges) s;
    END IF;
END;
$$;

-- The channel a watched job's finish is announced on (migrations/core/0010_flow_bounds.sql):
-- a secret of those who may read the jobs, so a login without skiplock's grants that LISTENs
-- learns no job's id or end (docs/security.md, "Flows between tenants"). One inlined read of a
-- one-row table, as skiplock._wake_channel; a deleted row falls back to the old fixed name
-- rather than failing every ack of a watched job.
CREATE OR REPLACE FUNCTION skiplock._finished_channel() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT c.channel FROM skiplock.finished_channel c), 'skiplock_finished')
$$;

-- The finished channel's name, for a waiter to LISTEN on (`skiplock::wait_for`, `skiplock
-- wait`): whoever may watch a job may read it (the enqueuer and operator roles, by grant;
-- sql/api/90_roles.sql), nobody else.
CREATE OR REPLACE FUNCTION skiplock.finished_channel() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT skiplock._finished_channel()
$$;

-- Finished jobs `ids`: each one watched (skiplock.watch) is announced on the finished channel
-- (skiplock._finished_channel), its id the payload, and its watch removed unless another
-- transaction holds it. The watch rows are read without a lock and removed FOR UPDATE SKIP
-- LOCKED: a watcher (any enqueuer may watch any job) that calls skiplock.watch in a
-- transaction it leaves open holds its row's lock until it ends, and a plain DELETE here
-- waited for it, holding the ack of the watched job and of every job of its batch
-- (tests/hardening_sql.rs, a_watchers_open_transaction_never_blocks_the_ack_of_the_job_it_watches).
-- A watch skipped is still announced; the watcher's next call, which finds the job finished,
-- removes it, or retention does once it is a day old (skiplock.watch).
CREATE OR REPLACE FUNCTION skiplock._tell_watchers(ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    told bigint;
BEGIN
    SELECT count(pg_notify(skiplock._finished_channel(), w.job_id::text)) INTO told
    FROM skiplock.job_watches w WHERE w.job_id = ANY (ids);
    IF told > 0 THEN
        DELETE FROM skiplock.job_watches w
        WHERE w.job_id IN (SELECT x.job_id FROM skiplock.job_watches x WHERE x.job_id = ANY (ids)
                           FOR UPDATE SKIP LOCKED);
    END IF;
END;
$$;

-- Jobs `ids` have just finished (completed, discarded or cancelled; every caller passes only
-- such jobs): tell whoever watches them (a NOTIFY on skiplock._finished_channel(), payload the
-- id; the watch is then removed) and settle the edges that wait for them
-- (skiplock._settle_edges), at most `max_edges` of them, cancel cascades included (NULL: all).
-- Returns the jobs that may have edges left to settle (NULL: none; skiplock._settle_edges). What the ack of jobs with neither watchers nor
-- dependents pays: two index probes. Planned without sequential scans, as the settling
-- functions are: the probe is an EXISTS, which the planner expects to stop early, so with
-- edges of earlier flows in the table (not yet analyzed) it chose to read every edge at every
-- ack batch of every queue (tests/flows.rs, an_ack_never_scans_every_edge_of_earlier_flows).
-- With generic plans, made once per connection: the ack's plan_cache_mode would plan the
-- probes anew at every batch, for arrays of hundreds of ids, which is what slowed the plain
-- drain when the probe was first forced onto the index (docs/performance.md, "Flows").
DROP FUNCTION IF EXISTS skiplock._settle(bigint[]);
CREATE OR REPLACE FUNCTION skiplock._settle(ids bigint[], max_edges integer DEFAULT NULL) RETURNS bigint[]
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM skiplock._tell_watchers(ids);
    IF EXISTS (SELECT 1 FROM skiplock.job_dependencies d
               WHERE d.depends_on = ANY (ids) AND d.resolved IS NULL) THEN
        RETURN (SELECT s.left_over FROM skiplock._settle_edges(ids, max_edges) s);
    END IF;
    RETURN NULL;
END;
$$;

-- The decision for waiting jobs whose counts were just taken (skiplock._settle_edges,
-- skiplock._recount): job `ids[i]` is cancelled when `cancel_for[i]` names the failed
-- dependency that cancels it ("dependency 41 discarded" in its errors), else released
-- (`available`, due now; its queue's workers woken) when `pending[i]` is 0. A job no longer
-- waiting is left as it is. Returns the ids it cancelled (NULL: none).
CREATE OR REPLACE FUNCTION skiplock._cancel_or_release(ids bigint[], pending integer[], cancel_for bigint[])
RETURNS bigint[] LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    cancelled bigint[];
BEGIN
    WITH d AS (
        -- In id order: the rows are locked in id order, as every statement that locks many
        -- jobs locks them, and written in the order the table and its primary key hold them.
        SELECT * FROM unnest(ids, pending, cancel_for) AS d(job_id, pending, cancel_for)
        ORDER BY d.job_id
    ), gone AS (
        UPDATE skiplock.jobs j
        SET state = 'cancelled', finalized_at = now(),
            errors = j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt, 'at', now(),
                'error', format('dependency %s %s', d.cancel_for,
                                (SELECT f.state FROM skiplock.jobs f WHERE f.id = d.cancel_for))))
        FROM d
        WHERE j.id = d.job_id AND j.state = 'waiting' AND d.cancel_for IS NOT NULL
        RETURNING j.id
    ), released AS (
        -- Due at the release's clock, not at its transaction's start: releasing a big
        -- fan-out takes a while, and a claim reads each lane from a little before its own
        -- clock on (src/worker/cursor.rs), so a job due much before its commit could sit
        -- behind that until a claim from the start of the lane.
        UPDATE skiplock.jobs j
        SET state = 'available', scheduled_at = greatest(j.scheduled_at, clock_timestamp())
        FROM d
        WHERE j.id = d.job_id AND j.state = 'waiting' AND d.pending = 0 AND d.cancel_for IS NULL
        RETURNING j.queue, j.priority, j.limit_key, j.scheduled_at
    ), woken AS (
        SELECT pg_notify(skiplock._wake_channel(), q.queue) FROM (SELECT DISTINCT r.queue FROM released r) q
    ), laned AS (
        -- Their lanes (skiplock._lanes_need): a job inserted waiting registered none.
        SELECT skiplock._lanes_need(array_agg(r.queue), array_agg(r.priority), array_agg(r.limit_key),
                                    array_agg(r.scheduled_at)) FROM released r
    )
    SELECT array_agg(g.id) INTO cancelled FROM gone g
    WHERE (SELECT count(*) FROM woken) + (SELECT count(*) FROM laned) >= 0;
    RETURN cancelled;
END;
$$;

-- The unresolved edges of finished jobs `ids`, at most `max_edges` of them in all (NULL: all),
-- over every step of a cascade; returns in `left_over` the jobs that may have edges left
-- (NULL: none), for a later call (the worker's slices, src/worker/acks.rs, or the
-- maintenance's sweep), and in `settled` how many edges it resolved. The jobs read by a step
-- that used up what was left of `max_edges` may have edges left; so may the jobs a step
-- cancelled, once nothing is left for the next step: a cascade stops there, and the next
-- call goes on from them. A statement therefore does at most `max_edges` edges' work however
-- deep the cascade (a chain of 20,000 jobs cancelled by its failed root was followed level by
-- level in the ack's statement until it passed the statement timeout, failing the whole ack
-- batch on every retry: docs/security.md, "Flows between tenants"). `first` (API 8): the
-- edges the first step settles, picked by the caller (skiplock._settle_slice,
-- skiplock._add_dependencies), instead of the first found. Each edge is
-- resolved once (its row lock decides between settlers: one that waited for it finds it
-- resolved and leaves it), its dependent's count goes down by one, and a dependent that was
-- waiting is then
--   cancelled, when the dependency did not complete and the dependent's policy is 'cancel'
--     ("dependency 41 discarded" in its errors; its own dependents and watchers follow,
--     transitively);
--   released (`available`, due now) when nothing is left to wait for.
-- A dependent no longer waiting (an operator cancelled or retried it) only has its count
-- kept. A sole edge (its dependent's only one, migration 0009) resolved with its dependency
-- completed is not counted: its dependent is released by the same statement (docs/internals.md,
-- "Flows"). Planned without sequential scans, as skiplock._heartbeat: the flow tables fill and
-- empty faster than autovacuum analyzes them, and a plan made on stale statistics that reads
-- the whole of job_dependencies (or jobs) at every ack batch would make a fan-in quadratic.
-- A function of its own so that an ack without flows never runs with that setting. Without
-- JIT: the cost a disabled sequential scan is given (of a one-row table, skiplock.wake_channel)
-- would make Postgres compile every statement's plan, for longer than the statement runs.
-- With generic plans (as skiplock._cancel_or_release): called from the ack, whose
-- plan_cache_mode would plan each of these statements anew at every batch, which cost a
-- fan-in's ack batches more than the settling itself (docs/performance.md, "Flows").
DROP FUNCTION IF EXISTS skiplock._settle_edges(bigint[]);
DROP FUNCTION IF EXISTS skiplock._settle_edges(bigint[], integer);
-- API 8's form returned the left-over jobs alone: dropped once (its arguments are this one's).
DO $drop$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = 'skiplock' AND p.proname = '_settle_edges'
                 AND p.prorettype = 'bigint[]'::pg_catalog.regtype) THEN
        DROP FUNCTION skiplock._settle_edges(bigint[], integer, tid[]);
    END IF;
END;
$drop$;
CREATE OR REPLACE FUNCTION skiplock._settle_edges(ids bigint[], max_edges integer DEFAULT NULL,
                                                  first tid[] DEFAULT NULL,
                                                  OUT left_over bigint[], OUT settled bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    dependents bigint[];
    counts bigint[];
    failed bigint[];
    picked_now bigint;
    done_now bigint;
    -- What is left of max_edges for the steps to come (NULL: no bound).
    budget bigint := max_edges;
    decided bigint[];
    decided_pending integer[];
    decided_cancel bigint[];
    cand_t tid[];
    cand_jobs bigint[];
    cand_counted bigint[];
    free bigint[];
BEGIN
    settled := 0;
    WHILE cardinality(ids) > 0 LOOP
        IF budget <= 0 THEN
            -- Jobs the last step cancelled: those with edges are the next call's (one probe
            -- each, at most one a cancelled job, so within the bound).
            left_over := left_over || ARRAY(
                SELECT x.id FROM unnest(ids) AS x(id)
                WHERE EXISTS (SELECT 1 FROM skiplock.job_dependencies d
                              WHERE d.depends_on = x.id AND d.resolved IS NULL));
            EXIT;
        END IF;
        -- The edges this step may settle (at most what is left of the budget), then their
        -- dependents' rows, locked FOR NO KEY UPDATE SKIP LOCKED (as a claim takes a job): a
        -- dependent another transaction holds (an enqueuer's replace of a waiting job it
        -- leaves uncommitted; any enqueuer may replace a keyed job) made the ack of its
        -- dependency wait for that transaction, and with it the ack's whole batch. Its edge
        -- is left unresolved, for the maintenance's sweep (skiplock.settle_dependencies) once
        -- the row is free (tests/flows.rs,
        -- a_replace_holding_a_waiting_dependent_never_blocks_its_dependencys_ack). Another
        -- settler is waited for, not skipped: the counts of dependents with several edges
        -- are locked first, in dependent order (two acks of one fan-in's children wait for
        -- each other there, as below, and never deadlock), and a settler that holds a
        -- dependent's row holds its count until it commits; a dependent with one edge has one
        -- settler only, the one that resolves that edge.
        SELECT array_agg(x.t), array_agg(x.job_id), array_agg(x.job_id) FILTER (WHERE NOT x.sole)
        INTO cand_t, cand_jobs, cand_counted
        FROM ((SELECT d.ctid AS t, d.job_id, d.sole FROM skiplock.job_dependencies d
               WHERE first IS NULL AND d.depends_on = ANY (ids) AND d.resolved IS NULL
               LIMIT budget)
              UNION ALL
              SELECT d.ctid, d.job_id, d.sole FROM skiplock.job_dependencies d
              WHERE d.ctid = ANY (first)) x;
        picked_now := coalesce(cardinality(cand_t), 0);
        IF cand_counted IS NOT NULL THEN
            PERFORM 1 FROM skiplock.job_waits w WHERE w.job_id = ANY (cand_counted)
            ORDER BY w.job_id FOR UPDATE;
        END IF;
        SELECT array_agg(c.id) INTO free FROM (
            SELECT c.id FROM skiplock.jobs c WHERE c.id = ANY (cand_jobs)
            FOR NO KEY UPDATE SKIP LOCKED) c;
        WITH picked AS MATERIALIZED (
            SELECT u.t FROM unnest(cand_t, cand_jobs) AS u(t, job_id) WHERE u.job_id = ANY (free)
        ), done AS (
            -- By ctid, as the claim takes its rows: an edge another settler resolved
            -- meanwhile has moved on to a new row version, and is left out.
            UPDATE skiplock.job_dependencies d SET resolved = j.state
            FROM skiplock.jobs j
            WHERE d.ctid = ANY (ARRAY(SELECT p.t FROM picked p)) AND d.resolved IS NULL
              AND j.id = d.depends_on AND j.state IN ('completed', 'discarded', 'cancelled')
            RETURNING d.job_id, d.depends_on, j.state, d.sole
        ), released AS (
            -- A sole edge (its dependent's only one) resolved with its dependency completed:
            -- the dependent is released here, with no count read or written, as
            -- skiplock._cancel_or_release releases (due at the release's clock; its comment
            -- says why), without the arrays, sort and second update that function costs. In
            -- id order, as every statement that locks many jobs takes them. This is every
            -- child of a fan-out and every link of a chain.
            UPDATE skiplock.jobs c
            SET state = 'available', scheduled_at = greatest(c.scheduled_at, clock_timestamp())
            FROM (SELECT done.job_id FROM done WHERE done.sole AND done.state = 'completed'
                  ORDER BY done.job_id) f
            WHERE c.id = f.job_id AND c.state = 'waiting'
            RETURNING c.queue, c.priority, c.limit_key, c.scheduled_at
        ), woken AS (
            SELECT pg_notify(skiplock._wake_channel(), q.queue) FROM (SELECT DISTINCT r.queue FROM released r) q
        ), laned AS (
            -- Their lanes (skiplock._lanes_need): a job inserted waiting registered none.
            SELECT skiplock._lanes_need(array_agg(r.queue), array_agg(r.priority), array_agg(r.limit_key),
                                        array_agg(r.scheduled_at)) FROM released r
        ), per AS (
            SELECT done.job_id, count(*) AS n,
                   min(done.depends_on) FILTER (WHERE done.state <> 'completed') AS failed_dep
            FROM done WHERE NOT (done.sole AND done.state = 'completed') GROUP BY done.job_id
        ), judged AS (
            -- A dependent whose remaining dependencies all resolved in this statement, none
            -- of them failed, is released without its count locked or written: no other
            -- settler can count it any more (its last edges are this transaction's). Its
            -- job_waits.pending keeps the count from before; it is read only while the job
            -- waits (skiplock.flow_members).
            SELECT per.*, per.n >= w.pending AND per.failed_dep IS NULL AS last
            FROM per JOIN skiplock.job_waits w ON w.job_id = per.job_id
        )
        SELECT array_agg(judged.job_id) FILTER (WHERE judged.last),
               array_agg(judged.job_id ORDER BY judged.job_id) FILTER (WHERE NOT judged.last),
               array_agg(judged.n ORDER BY judged.job_id) FILTER (WHERE NOT judged.last),
               array_agg(judged.failed_dep ORDER BY judged.job_id) FILTER (WHERE NOT judged.last),
               (SELECT count(*) FROM done)
        INTO decided, dependents, counts, failed, done_now
        FROM judged WHERE (SELECT count(*) FROM woken) + (SELECT count(*) FROM laned) >= 0;
        settled := settled + done_now;
        budget := budget - picked_now;
        -- A step that used up the budget may have left edges behind: the jobs it read are
        -- named for the next call (which finds what is left, or nothing), not probed again here.
        IF budget <= 0 THEN
            left_over := left_over || ids;
        END IF;
        first := NULL;
        EXIT WHEN decided IS NULL AND dependents IS NULL;
        decided_pending := array_fill(0, ARRAY[coalesce(cardinality(decided), 0)]);
        decided_cancel := array_fill(NULL::bigint, ARRAY[coalesce(cardinality(decided), 0)]);
        IF dependents IS NOT NULL THEN
            -- Counts are taken in dependent order: two acks of one fan-in's children wait
            -- for each other, and never deadlock.
            PERFORM 1 FROM skiplock.job_waits w WHERE w.job_id = ANY (dependents)
            ORDER BY w.job_id FOR UPDATE;
            WITH counted AS (
                UPDATE skiplock.job_waits w
                SET pending = greatest(w.pending - u.n, 0),
                    cancelled_by = CASE WHEN u.failed_dep IS NOT NULL AND w.on_dependency_failure = 'cancel'
                                        THEN coalesce(w.cancelled_by, u.failed_dep) ELSE w.cancelled_by END
                FROM unnest(dependents, counts, failed) AS u(job_id, n, failed_dep)
                WHERE w.job_id = u.job_id
                RETURNING w.job_id, w.pending,
                          CASE WHEN w.on_dependency_failure = 'cancel' THEN u.failed_dep END AS cancel_for
            )
            SELECT coalesce(decided, '{}') || array_agg(c.job_id),
                   decided_pending || array_agg(c.pending),
                   decided_cancel || array_agg(c.cancel_for)
            INTO decided, decided_pending, decided_cancel
            FROM counted c WHERE c.pending = 0 OR c.cancel_for IS NOT NULL;
        END IF;
        ids := NULL;
        IF cardinality(decided) > 0 THEN
            ids := skiplock._cancel_or_release(decided, decided_pending, decided_cancel);
        END IF;
        IF ids IS NOT NULL THEN
            PERFORM skiplock._tell_watchers(ids);
        END IF;
    END LOOP;
    left_over := nullif(left_over, '{}');
END;
$$;

-- One slice of what acks left to settle (the worker's, src/worker/acks.rs): the unresolved
-- edges of finished jobs `deps`, each read from its cursor in `afters` on (the greatest
-- dependent id a slice before settled; the least bigint: from the start) in dependent order,
-- at most `max_edges` in all, settled as skiplock._settle_edges settles them. Returns the jobs
-- that may have edges left, each with its cursor: the slice's own, and the jobs a cancel
-- cascade left when the slice's edges were used up (from the start). Resuming from a cursor is what keeps a big
-- fan-out linear: a slice that read the dependency's edges from the first stepped over every
-- edge settled before it (docs/performance.md, "Flows"). Planned as skiplock._settle_edges.
CREATE OR REPLACE FUNCTION skiplock._settle_slice(deps bigint[], afters bigint[], max_edges integer,
                                                  OUT left_deps bigint[], OUT left_afters bigint[])
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    tids tid[];
    read bigint[];
    cascade bigint[];
BEGIN
    IF max_edges IS NULL OR max_edges < 1 OR cardinality(deps) IS DISTINCT FROM cardinality(afters) THEN
        RAISE EXCEPTION 'skiplock: _settle_slice needs one cursor per job and a slice of at least one edge'
            USING ERRCODE = '22023';
    END IF;
    WITH cand AS MATERIALIZED (
        SELECT c.o, c.dep, c.after, e.t, e.job_id
        FROM unnest(deps, afters) WITH ORDINALITY AS c(dep, after, o)
        CROSS JOIN LATERAL (
            SELECT d.ctid AS t, d.job_id FROM skiplock.job_dependencies d
            WHERE d.depends_on = c.dep AND d.job_id > c.after AND d.resolved IS NULL
            ORDER BY d.job_id
            LIMIT max_edges) e
    ), picked AS MATERIALIZED (
        SELECT * FROM cand ORDER BY cand.o, cand.job_id LIMIT max_edges
    ), per AS (
        SELECT c.o, c.dep, count(*) AS got, max(c.after) AS after FROM cand c GROUP BY c.o, c.dep
    ), took AS (
        SELECT p.o, count(*) AS took, max(p.job_id) AS cursor FROM picked p GROUP BY p.o
    )
    -- A job has edges left when the slice took fewer than it found, or found a full slice of
    -- its own.
    SELECT (SELECT array_agg(p.t) FROM picked p),
           (SELECT array_agg(DISTINCT p.dep) FROM picked p),
           array_agg(per.dep ORDER BY per.o)
               FILTER (WHERE coalesce(took.took, 0) < per.got OR per.got >= max_edges),
           array_agg(coalesce(took.cursor, per.after) ORDER BY per.o)
               FILTER (WHERE coalesce(took.took, 0) < per.got OR per.got >= max_edges)
    INTO tids, read, left_deps, left_afters
    FROM per LEFT JOIN took ON took.o = per.o;
    IF tids IS NOT NULL THEN
        -- The jobs of `read` come back when the slice was full; their cursors say the rest.
        SELECT array_agg(x) INTO cascade
        FROM unnest((SELECT s.left_over FROM skiplock._settle_edges(read, max_edges, tids) s)) AS x
        WHERE NOT x = ANY (read);
        IF cascade IS NOT NULL THEN
            left_deps := coalesce(left_deps, '{}') || cascade;
            left_afters := coalesce(left_afters, '{}')
                           || array_fill('-9223372036854775808'::bigint, ARRAY[cardinality(cascade)]);
        END IF;
    END IF;
END;
$$;

-- Recounts the dependencies of jobs `ids` from their dependencies' states now (the rare
-- path: skiplock._revive), then cancels or releases each that waits, as skiplock._settle
-- does, and settles the dependents of those it cancels.
CREATE OR REPLACE FUNCTION skiplock._recount(ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    cancelled bigint[];
BEGIN
    PERFORM 1 FROM skiplock.job_waits w WHERE w.job_id = ANY (ids) ORDER BY w.job_id FOR UPDATE;
    UPDATE skiplock.job_dependencies d
    SET resolved = CASE WHEN j.state IN ('completed', 'discarded', 'cancelled') THEN j.state END
    FROM skiplock.jobs j
    WHERE d.job_id = ANY (ids) AND j.id = d.depends_on
      AND d.resolved IS DISTINCT FROM CASE WHEN j.state IN ('completed', 'discarded', 'cancelled') THEN j.state END;
    WITH counts AS (
        SELECT d.job_id, count(*) FILTER (WHERE d.resolved IS NULL) AS pending,
               min(d.depends_on) FILTER (WHERE d.resolved IN ('discarded', 'cancelled')) AS failed_dep
        FROM skiplock.job_dependencies d WHERE d.job_id = ANY (ids) GROUP BY d.job_id
    ), counted AS (
        UPDATE skiplock.job_waits w
        SET pending = c.pending,
            cancelled_by = CASE WHEN w.on_dependency_failure = 'cancel' THEN c.failed_dep END
        FROM counts c WHERE w.job_id = c.job_id
        RETURNING w.job_id, w.pending, w.cancelled_by
    )
    SELECT skiplock._cancel_or_release(array_agg(c.job_id), array_agg(c.pending), array_agg(c.cancelled_by))
    INTO cancelled FROM counted c;
    IF cancelled IS NOT NULL THEN
        -- At most 1,000 edges here, as a slice of the worker's: a cascade deeper than that
        -- goes on in the maintenance's sweep (skiplock.settle_dependencies).
        PERFORM skiplock._settle(cancelled, 1000);
    END IF;
END;
$$;

-- Jobs `ids` were just retried (skiplock.retry, retry_jobs): bring their flow back to life.
-- Upstream, the failed dependencies they wait for through a 'cancel' edge are retried too
-- (transitively): a dependent retried alone would only be cancelled again. Downstream, the
-- dependents the failures cancelled (job_waits.cancelled_by) wait again, transitively. Then
-- every job involved that has dependencies is recounted (skiplock._recount): a retried
-- dependent waits again for what has not completed.
CREATE OR REPLACE FUNCTION skiplock._revive(ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    up bigint[];
    down bigint[];
    woken bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM skiplock.job_dependencies d WHERE d.depends_on = ANY (ids))
       AND NOT EXISTS (SELECT 1 FROM skiplock.job_waits w WHERE w.job_id = ANY (ids)) THEN
        RETURN;
    END IF;
    WITH RECURSIVE u(id) AS (
        SELECT unnest(ids)
        UNION
        SELECT d.depends_on
        FROM u
        JOIN skiplock.job_dependencies d ON d.job_id = u.id
        JOIN skiplock.job_waits w ON w.job_id = d.job_id AND w.on_dependency_failure = 'cancel'
        JOIN skiplock.jobs j ON j.id = d.depends_on AND j.state IN ('discarded', 'cancelled')
    )
    SELECT array_agg(u.id ORDER BY u.id) INTO up FROM u;
    WITH moved AS (
        UPDATE skiplock.jobs j
        SET state = 'available', scheduled_at = now(), finalized_at = NULL,
            max_attempts = greatest(j.max_attempts, j.attempt + 1)
        WHERE j.id = ANY (up) AND NOT j.id = ANY (ids) AND j.state IN ('discarded', 'cancelled')
        RETURNING j.queue, j.priority, j.limit_key, j.scheduled_at
    ), laned AS (
        -- Their lanes (skiplock._lanes_need), as skiplock.retry registers them.
        SELECT skiplock._lanes_need(array_agg(m.queue), array_agg(m.priority), array_agg(m.limit_key),
                                    array_agg(m.scheduled_at)) FROM moved m
    )
    SELECT count(pg_notify(skiplock._wake_channel(), q.queue)) + (SELECT count(*) FROM laned) INTO woken
    FROM (SELECT DISTINCT m.queue FROM moved m) q;
    WITH RECURSIVE dn(id) AS (
        SELECT unnest(up)
        UNION
        SELECT d.job_id
        FROM dn
        JOIN skiplock.job_dependencies d ON d.depends_on = dn.id
        JOIN skiplock.job_waits w ON w.job_id = d.job_id
        JOIN skiplock.jobs j ON j.id = d.job_id
        WHERE j.state = 'waiting' OR (j.state = 'cancelled' AND w.cancelled_by IS NOT NULL)
    )
    SELECT array_agg(dn.id ORDER BY dn.id) INTO down FROM dn;
    UPDATE skiplock.jobs j SET state = 'waiting', finalized_at = NULL
    FROM skiplock.job_waits w
    WHERE j.id = ANY (down) AND w.job_id = j.id AND j.state = 'cancelled' AND w.cancelled_by IS NOT NULL;
    -- A retried job with dependencies waits for them again until the recount releases it.
    UPDATE skiplock.jobs j SET state = 'waiting'
    FROM skiplock.job_waits w
    WHERE j.id = ANY (up) AND w.job_id = j.id AND j.state = 'available';
    PERFORM skiplock._recount(down);
END;
$$;

-- The maintenance's sweep: settles edges whose dependency finished without settling them
-- (a job discarded by the rescuer, the reaper or a claim, or finished by a plain UPDATE from
-- psql; an ack that could not see edges committed after it read them, docs/flows.md; a cancel
-- cascade a statement stopped at its bound), at most `max_rows` edges per call, cancel
-- cascades included (from at most `max_rows` finished jobs): each call does bounded work
-- however deep a cascade, and the next one goes on from where it stopped (a chain of 20,000
-- jobs under a statement timeout of 2 s: tests/flows.rs). Returns how many edges it settled
-- (0: nothing was left); the rescuer calls it again while a call settles `max_rows`.
CREATE OR REPLACE FUNCTION skiplock.settle_dependencies(max_rows integer DEFAULT 1000)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ids bigint[];
    n bigint;
BEGIN
    IF settle_dependencies.max_rows IS NULL OR settle_dependencies.max_rows < 1 THEN
        RAISE EXCEPTION 'skiplock: settle_dependencies max_rows must be at least 1, got %',
            coalesce(settle_dependencies.max_rows::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(x.depends_on) INTO ids
    FROM (SELECT DISTINCT d.depends_on
          FROM skiplock.job_dependencies d
          JOIN skiplock.jobs j ON j.id = d.depends_on
          WHERE d.resolved IS NULL AND j.state IN ('completed', 'discarded', 'cancelled')
          LIMIT settle_dependencies.max_rows) x;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM skiplock._tell_watchers(ids);
    SELECT s.settled INTO n FROM skiplock._settle_edges(ids, settle_dependencies.max_rows) s;
    RETURN n;
END;
$$;

-- A flow in one call (docs/flows.md): `flow` is a JSON array of jobs, each an object with a
-- local `name` and `kind` and, optionally, args, queue, run_at, priority, max_attempts,
-- unique_key, on_conflict, limit_key, tags, meta, unique_by, unique_for (an interval, as
-- text), on_dependency_failure and depends_on (names
-- of other jobs of the flow, or ids of existing jobs). Enqueued atomically in dependency
-- order; an unknown name, a duplicate name, an unknown field or a cycle is refused with
-- nothing inserted, and so is a flow whose edges, all jobs together, are more than
-- `depends_on.max_edges` (skiplock._check_edge_count). Returns {"flow": <id>, "jobs":
-- {name: id, …}}; the flow's members are recorded in skiplock.flow_jobs under its id
-- (skiplock.flow_progress reads them). The flow's id is that of the first job this call
-- inserted, never one a job was deduplicated into (or replaced): that job may be another
-- flow's first, even another enqueuer's, and this flow's jobs would be recorded as members of
-- that one (docs/security.md, "Flows between tenants"). When every job was deduplicated, the
-- flow's id is its first job's, and nothing is recorded (a flow enqueued again with the same
-- keys answers with the flow it was the first time).
CREATE OR REPLACE FUNCTION skiplock.enqueue_flow(flow jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer;
    item jsonb;
    i integer;
    nm text;
    dep jsonb;
    bad text;
    -- Each name's first position in `flow` (1-based), built once: a name is looked up in
    -- O(log n), so a flow of 10,000 jobs costs about 10,000 enqueues, not 10,000² lookups.
    pos jsonb;
    -- By position: the id each job placed so far was given (NULL: not yet).
    ids bigint[];
    -- The flow's named edges, read once (Kahn's algorithm): by position, how many of a job's
    -- named dependencies are not placed yet; the positions of the jobs that name each job,
    -- grouped by that job's position (`succ`), and where each group starts (`succ_at`,
    -- n + 1 entries); the positions ready to place, in the order they became ready.
    indeg integer[];
    succ integer[];
    succ_at integer[];
    ready integer[];
    head integer := 1;
    at integer;
    next_job integer;
    dep_ids bigint[];
    new_id bigint;
    what skiplock.enqueue_outcome;
    the_flow bigint;
    first_id bigint;
BEGIN
    IF flow IS NULL OR jsonb_typeof(flow) <> 'array' OR jsonb_array_length(flow) = 0 THEN
        RAISE EXCEPTION 'skiplock: enqueue_flow takes a non-empty JSON array of jobs' USING ERRCODE = '22023';
    END IF;
    n := jsonb_array_length(flow);
    IF n > skiplock._limit('enqueue_many.max_rows') THEN
        RAISE EXCEPTION 'skiplock: enqueue_flow got % jobs (at most %, setting enqueue_many.max_rows)',
            n, skiplock._limit('enqueue_many.max_rows') USING ERRCODE = '22023';
    END IF;
    -- Ordered so that, of a repeated name, the first position is the one kept.
    SELECT coalesce(jsonb_object_agg(t.e ->> 'name', t.o ORDER BY t.o DESC), '{}') INTO pos
    FROM jsonb_array_elements(flow) WITH ORDINALITY AS t(e, o)
    WHERE jsonb_typeof(t.e) = 'object' AND jsonb_typeof(t.e -> 'name') = 'string';
    i := 0;
    FOR item IN SELECT e FROM jsonb_array_elements(flow) AS e LOOP
        i := i + 1;
        IF jsonb_typeof(item) <> 'object' THEN
            RAISE EXCEPTION 'skiplock: enqueue_flow: each job must be a JSON object, got %', left(item::text, 100)
                USING ERRCODE = '22023';
        END IF;
        nm := item ->> 'name';
        IF jsonb_typeof(item -> 'name') IS DISTINCT FROM 'string' OR nm = '' OR length(nm) > 200 THEN
            RAISE EXCEPTION 'skiplock: enqueue_flow: every job needs a "name" (a string of 1 to 200 characters), got %',
                left(item::text, 100) USING ERRCODE = '22023';
        END IF;
        IF (pos ->> nm)::integer < i THEN
            RAISE EXCEPTION 'skiplock: enqueue_flow: two jobs are named %', quote_literal(nm) USING ERRCODE = '22023';
        END IF;
        SELECT min(k) INTO bad FROM jsonb_object_keys(item) AS k
        WHERE k NOT IN ('name', 'kind', 'args', 'queue', 'run_at', 'priority', 'max_attempts', 'unique_key',
                        'on_conflict', 'limit_key', 'tags', 'meta', 'unique_by', 'unique_for', 'depends_on',
                        'on_dependency_failure');
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'skiplock: enqueue_flow: job % has an unknown field %', quote_literal(nm), quote_literal(bad)
                USING ERRCODE = '22023';
        END IF;
        IF item ? 'depends_on' AND jsonb_typeof(item -> 'depends_on') <> 'array' THEN
            RAISE EXCEPTION 'skiplock: enqueue_flow: depends_on of job % must be an array of names or job ids', quote_literal(nm)
                USING ERRCODE = '22023';
        END IF;
    END LOOP;
    -- Every dependency names a job of the flow (a string) or an existing job (a number).
    FOR item IN SELECT e FROM jsonb_array_elements(flow) AS e LOOP
        FOR dep IN SELECT d FROM jsonb_array_elements(coalesce(item -> 'depends_on', '[]')) AS d LOOP
            IF jsonb_typeof(dep) = 'string' THEN
                IF NOT pos ? (dep #>> '{}') THEN
                    RAISE EXCEPTION 'skiplock: enqueue_flow: job % depends on %, which is not a job of the flow',
                        quote_literal(item ->> 'name'), quote_literal(dep #>> '{}') USING ERRCODE = '22023';
                END IF;
            ELSIF jsonb_typeof(dep) <> 'number' THEN
                RAISE EXCEPTION 'skiplock: enqueue_flow: depends_on of job % holds %, not a name or a job id',
                    quote_literal(item ->> 'name'), left(dep::text, 100) USING ERRCODE = '22023';
            END IF;
        END LOOP;
    END LOOP;
    PERFORM skiplock._check_edge_count(
        (SELECT coalesce(sum((SELECT count(DISTINCT d) FROM jsonb_array_elements(coalesce(t.e -> 'depends_on', '[]')) AS d)), 0)
         FROM jsonb_array_elements(flow) AS t(e))::bigint,
        'the flow''s jobs together');
    -- Dependency order (Kahn): the jobs with no named dependency are ready at first, in flow
    -- order; placing a job makes ready each job whose last named dependency it was. Each
    -- edge is read once, so a flow costs about its jobs' enqueues in any order it is listed
    -- (reading every remaining job again at each placement made a chain listed dependents
    -- first quadratic: 4,000 jobs took 34 s). A job never made ready is on a cycle, or waits
    -- for one.
    WITH e AS (
        SELECT DISTINCT t.o::integer AS job, (pos ->> (d #>> '{}'))::integer AS dep
        FROM jsonb_array_elements(flow) WITH ORDINALITY AS t(e, o),
             jsonb_array_elements(coalesce(t.e -> 'depends_on', '[]')) AS d
        WHERE jsonb_typeof(d) = 'string'
    )
    SELECT (SELECT array_agg(coalesce(x.m, 0) ORDER BY g.i)
            FROM generate_series(1, n) AS g(i)
            LEFT JOIN (SELECT e.job, count(*)::integer AS m FROM e GROUP BY e.job) x ON x.job = g.i),
           (SELECT coalesce(array_agg(e.job ORDER BY e.dep, e.job), '{}') FROM e),
           (SELECT array_agg(1 + coalesce(x.before, 0)::integer ORDER BY x.i)
            FROM (SELECT g.i, sum(y.m) OVER (ORDER BY g.i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
                  FROM generate_series(1, n + 1) AS g(i)
                  LEFT JOIN (SELECT e.dep, count(*) AS m FROM e GROUP BY e.dep) y ON y.dep = g.i) x)
    INTO indeg, succ, succ_at;
    ready := ARRAY(SELECT g.i FROM generate_series(1, n) AS g(i) WHERE indeg[g.i] = 0 ORDER BY g.i);
    ids := array_fill(NULL::bigint, ARRAY[n]);
    WHILE head <= cardinality(ready) LOOP
        i := ready[head];
        head := head + 1;
        item := flow -> (i - 1);
        SELECT array_agg(CASE WHEN jsonb_typeof(d) = 'string' THEN ids[(pos ->> (d #>> '{}'))::integer]
                              ELSE (d #>> '{}')::bigint END)
        INTO dep_ids FROM jsonb_array_elements(coalesce(item -> 'depends_on', '[]')) AS d;
        PERFORM skiplock._check_enqueue_names(item ->> 'kind', coalesce(item ->> 'queue', 'default'),
                                              item ->> 'unique_key');
        SELECT e.job_id, e.outcome INTO new_id, what FROM skiplock._enqueue_outcome(
            item ->> 'kind', coalesce(item -> 'args', '{}'), coalesce(item ->> 'queue', 'default'),
            coalesce((item ->> 'run_at')::timestamptz, now()), coalesce((item ->> 'priority')::smallint, 0::smallint),
            coalesce((item ->> 'max_attempts')::integer, 25), item ->> 'unique_key',
            coalesce(item ->> 'on_conflict', 'keep'), item ->> 'limit_key',
            (SELECT array_agg(t) FROM jsonb_array_elements_text(item -> 'tags') AS t),
            item -> 'meta', item ->> 'unique_by', (item ->> 'unique_for')::interval, dep_ids,
            item ->> 'on_dependency_failure') e;
        ids[i] := new_id;
        first_id := coalesce(first_id, new_id);
        IF what = 'inserted' THEN
            the_flow := coalesce(the_flow, new_id);
        END IF;
        FOR at IN succ_at[i] .. succ_at[i + 1] - 1 LOOP
            next_job := succ[at];
            indeg[next_job] := indeg[next_job] - 1;
            IF indeg[next_job] = 0 THEN
                ready := array_append(ready, next_job);
            END IF;
        END LOOP;
    END LOOP;
    IF cardinality(ready) < n THEN
        RAISE EXCEPTION 'skiplock: enqueue_flow: the dependencies of % form a cycle',
            (SELECT string_agg(quote_literal(flow -> (g.i - 1) ->> 'name'), ', ' ORDER BY g.i)
             FROM generate_series(1, n) AS g(i) WHERE indeg[g.i] > 0)
            USING ERRCODE = '22023';
    END IF;
    IF the_flow IS NOT NULL THEN
        INSERT INTO skiplock.flow_jobs (flow_id, name, job_id)
        SELECT the_flow, t.e ->> 'name', ids[t.o] FROM jsonb_array_elements(flow) WITH ORDINALITY AS t(e, o)
        ON CONFLICT DO NOTHING;
    END IF;
    the_flow := coalesce(the_flow, first_id);
    RETURN jsonb_build_object('flow', the_flow,
                              'jobs', (SELECT jsonb_object_agg(t.e ->> 'name', ids[t.o])
                                       FROM jsonb_array_elements(flow) WITH ORDINALITY AS t(e, o)));
END;
$$;

-- A batch (docs/flows.md, "Batches"): the jobs of `jobs` (a JSON array of job objects as
-- skiplock.enqueue_flow takes them, names optional: `0`, `1`, … by default) and `callback`
-- (one job object, named `callback`), which runs once every job of the batch has finished,
-- however (on_dependency_failure 'run'): it counts how they went from
-- skiplock.dependency_results. Returns what skiplock.enqueue_flow returns.
CREATE OR REPLACE FUNCTION skiplock.enqueue_batch(jobs jsonb, callback jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    named jsonb;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' OR jsonb_array_length(jobs) = 0 THEN
        RAISE EXCEPTION 'skiplock: enqueue_batch takes a non-empty JSON array of jobs' USING ERRCODE = '22023';
    END IF;
    IF callback IS NULL OR jsonb_typeof(callback) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: enqueue_batch takes a callback job (a JSON object)' USING ERRCODE = '22023';
    END IF;
    IF callback ? 'depends_on' OR callback ? 'on_dependency_failure' THEN
        RAISE EXCEPTION 'skiplock: enqueue_batch: the callback waits for the batch (no depends_on or on_dependency_failure of its own)'
            USING ERRCODE = '22023';
    END IF;
    SELECT jsonb_agg(CASE WHEN jsonb_typeof(e) = 'object' AND NOT e ? 'name'
                          THEN e || jsonb_build_object('name', (o - 1)::text) ELSE e END ORDER BY o)
    INTO named FROM jsonb_array_elements(jobs) WITH ORDINALITY AS t(e, o);
    RETURN skiplock.enqueue_flow(named || jsonb_build_array(
        callback || jsonb_build_object('name', 'callback', 'on_dependency_failure', 'run',
                                       'depends_on', (SELECT jsonb_agg(e -> 'name') FROM jsonb_array_elements(named) AS e))));
END;
$$;

-- The dependencies of job `job_id` with how they finished: id, local name in its flow (NULL
-- outside one), kind, state and result (what the handler returned on completion), the first
-- `max_rows` by id (NULL: all). What a handler reads (`ctx.dependency_results()`, all of them:
-- a batch's callback counts states from it); the job page and `skiplock job` show the first
-- hundred and how many more there are (skiplock.dependency_counts). The 1-argument form is
-- dropped (the same calls resolve to this one).
DROP FUNCTION IF EXISTS skiplock.dependency_results(bigint);
CREATE OR REPLACE FUNCTION skiplock.dependency_results(job_id bigint, max_rows bigint DEFAULT NULL)
RETURNS TABLE (id bigint, name text, kind text, state skiplock.job_state, result jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT d.depends_on, (SELECT f.name FROM skiplock.flow_jobs f WHERE f.job_id = d.depends_on LIMIT 1),
           j.kind, j.state, j.result
    FROM skiplock.job_dependencies d
    LEFT JOIN skiplock.jobs j ON j.id = d.depends_on
    WHERE d.job_id = dependency_results.job_id
    ORDER BY d.depends_on
    LIMIT dependency_results.max_rows
$$;

-- The jobs that wait for job `job_id`, with their states (the job page's "dependents"), the
-- first `max_rows` by id (NULL: all): any enqueuer may make jobs wait for any job, so a job
-- may have millions of dependents. The 1-argument form is dropped.
DROP FUNCTION IF EXISTS skiplock.dependents(bigint);
CREATE OR REPLACE FUNCTION skiplock.dependents(job_id bigint, max_rows bigint DEFAULT NULL)
RETURNS TABLE (id bigint, kind text, state skiplock.job_state)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT d.job_id, j.kind, j.state
    FROM skiplock.job_dependencies d
    JOIN skiplock.jobs j ON j.id = d.job_id
    WHERE d.depends_on = dependents.job_id
    ORDER BY d.job_id
    LIMIT dependents.max_rows
$$;

-- How many dependencies job `job_id` has and how many jobs depend on it, each counted up to
-- `up_to` (NULL: all): what the job page and `skiplock job` say past the rows they show
-- ("and 99,900 more").
CREATE OR REPLACE FUNCTION skiplock.dependency_counts(job_id bigint, up_to bigint DEFAULT NULL,
                                                      OUT dependencies bigint, OUT dependents bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT (SELECT count(*) FROM (SELECT 1 FROM skiplock.job_dependencies d
                                  WHERE d.job_id = dependency_counts.job_id
                                  LIMIT dependency_counts.up_to) x),
           (SELECT count(*) FROM (SELECT 1 FROM skiplock.job_dependencies d
                                  WHERE d.depends_on = dependency_counts.job_id
                                  LIMIT dependency_counts.up_to) x)
$$;

-- The jobs of flow `flow` as skiplock.flow_members and skiplock.flow_progress read them: the
-- recorded members of a flow skiplock.enqueue_flow made (with their names; at most as many
-- as one call enqueues), or else job `flow` and the jobs that depend on it, transitively,
-- walked breadth first and at most `max_jobs` of them: one more is returned, marked `beyond`,
-- when the walk goes on past the bound. Any enqueuer may chain jobs, and the walk of a chain
-- of 20,000 took 18.7 s (docs/security.md, "Flows between tenants"): bounded, and each step
-- an index probe (without hash or merge joins, which read every edge at every step, or
-- sequential scans).
CREATE OR REPLACE FUNCTION skiplock._flow_walk(flow bigint, max_jobs bigint)
RETURNS TABLE (name text, id bigint, beyond boolean)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
    WITH RECURSIVE recorded AS (
        SELECT f.name, f.job_id FROM skiplock.flow_jobs f WHERE f.flow_id = _flow_walk.flow
    ), reached(id) AS (
        SELECT _flow_walk.flow WHERE NOT EXISTS (SELECT 1 FROM recorded)
        UNION
        SELECT d.job_id FROM reached r JOIN skiplock.job_dependencies d ON d.depends_on = r.id
    ), walked AS (
        -- The recursion runs only as far as this LIMIT reads it.
        SELECT x.id, row_number() OVER () AS n
        FROM (SELECT r.id FROM reached r LIMIT _flow_walk.max_jobs + 1) x
    )
    SELECT r.name, r.job_id, false FROM recorded r
    UNION ALL
    SELECT (SELECT f.name FROM skiplock.flow_jobs f WHERE f.job_id = w.id LIMIT 1), w.id,
           w.n > _flow_walk.max_jobs
    FROM walked w
$$;

-- The jobs of a flow: `flow` is the id skiplock.enqueue_flow returned (its members are
-- recorded, with their names), or any job's id: that job and everything that depends on it,
-- transitively (a batch's children and callback, a chain), at most `flow_members.max_jobs`
-- of them (skiplock.settings, 10,000; skiplock._flow_walk; flow_progress says when the walk
-- stopped there). With each job's state and how many dependencies it still waits for (0 once
-- it no longer waits: a job released by the statement that resolved its last edges keeps its
-- count unwritten, skiplock._settle_edges).
CREATE OR REPLACE FUNCTION skiplock.flow_members(flow bigint)
RETURNS TABLE (name text, id bigint, kind text, state skiplock.job_state, pending integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT m.name, j.id, j.kind, j.state, CASE WHEN j.state = 'waiting' THEN coalesce(w.pending, 0) ELSE 0 END
    FROM skiplock._flow_walk(flow_members.flow, skiplock._limit('flow_members.max_jobs')) m
    JOIN skiplock.jobs j ON j.id = m.id
    LEFT JOIN skiplock.job_waits w ON w.job_id = j.id
    WHERE NOT m.beyond
    ORDER BY j.id
$$;

-- Progress of a flow (skiplock.flow_members): how many of its jobs are in each state, and
-- whether the walk from a job that is not a recorded flow stopped at its bound
-- (`truncated`, API 9: the counts are then of the first `flow_members.max_jobs` jobs it
-- reached). The return type changed in API 9: the earlier function is dropped first.
DO $drop$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = 'skiplock' AND p.proname = 'flow_progress'
                 AND NOT 'truncated' = ANY (p.proargnames)) THEN
        DROP FUNCTION skiplock.flow_progress(bigint);
    END IF;
END;
$drop$;
CREATE OR REPLACE FUNCTION skiplock.flow_progress(flow bigint)
RETURNS TABLE (total bigint, waiting bigint, available bigint, running bigint,
               completed bigint, discarded bigint, cancelled bigint, truncated boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT count(j.id) FILTER (WHERE NOT m.beyond),
           count(*) FILTER (WHERE NOT m.beyond AND j.state = 'waiting'),
           count(*) FILTER (WHERE NOT m.beyond AND j.state = 'available'),
           count(*) FILTER (WHERE NOT m.beyond AND j.state = 'running'),
           count(*) FILTER (WHERE NOT m.beyond AND j.state = 'completed'),
           count(*) FILTER (WHERE NOT m.beyond AND j.state = 'discarded'),
           count(*) FILTER (WHERE NOT m.beyond AND j.state = 'cancelled'),
           coalesce(bool_or(m.beyond), false)
    FROM skiplock._flow_walk(flow_progress.flow, skiplock._limit('flow_members.max_jobs')) m
    LEFT JOIN skiplock.jobs j ON j.id = m.id
$$;

-- Registers interest in job `job_id` finishing (its ack then sends a NOTIFY with the id on
-- the finished channel, skiplock.finished_channel(): `skiplock::wait_for` listens) and returns its state and result now. A
-- watcher refreshes its row while it waits, and the call that finds the job finished removes
-- it; retention forgets rows not refreshed for a day.
CREATE OR REPLACE FUNCTION skiplock.watch(job_id bigint)
RETURNS TABLE (state skiplock.job_state, result jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SELECT j.state, j.result INTO state, result FROM skiplock.jobs j WHERE j.id = watch.job_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: job % does not exist', watch.job_id USING ERRCODE = 'P0002';
    END IF;
    IF state NOT IN ('completed', 'discarded', 'cancelled') THEN
        INSERT INTO skiplock.job_watches AS w (job_id) VALUES (watch.job_id)
        ON CONFLICT ON CONSTRAINT job_watches_pkey DO UPDATE SET since = now()
        WHERE w.since < now() - interval '1 minute';
    ELSE
        -- A watch an earlier call inserted while the job's ack was committing (that ack's
        -- settle could not see it): the caller has seen the end now, so it goes.
        DELETE FROM skiplock.job_watches w WHERE w.job_id = watch.job_id;
    END IF;
    RETURN NEXT;
END;
$$;

-- Waits up to `timeout` for job `job_id` to finish, for any language with a Postgres driver:
-- its state and result, and whether it finished (false: the timeout passed first; the state
-- is then the one it has). It polls the row (a function cannot receive NOTIFY), every 10 ms
-- at first and at most every 100 ms, and takes no lock. Its statement holds a snapshot for
-- as long as it waits, which holds back vacuum (docs/flows.md): prefer short timeouts, called
-- again, or `skiplock::wait_for`, which listens.
CREATE OR REPLACE FUNCTION skiplock.wait(job_id bigint, timeout interval DEFAULT '30 seconds')
RETURNS TABLE (state skiplock.job_state, result jsonb, finished boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- In seconds: an interval mixing months and days of opposite signs compares by its
    -- months counted as 30 days, and is added by calendar ('1000 years -360000 days' passed
    -- the check as under an hour and waited until 2041); its length in seconds is both what
    -- is checked and what is waited.
    secs double precision := extract(epoch FROM coalesce(wait.timeout, '0'));
    deadline timestamptz;
    pause double precision := 0.01;
BEGIN
    IF NOT secs BETWEEN 0 AND 3600 THEN
        RAISE EXCEPTION 'skiplock: wait timeout must be between 0 and 1 hour, got %', wait.timeout
            USING ERRCODE = '22023';
    END IF;
    deadline := clock_timestamp() + make_interval(secs => secs);
    LOOP
        SELECT j.state, j.result INTO state, result FROM skiplock.jobs j WHERE j.id = wait.job_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'skiplock: job % does not exist', wait.job_id USING ERRCODE = 'P0002';
        END IF;
        finished := state IN ('completed', 'discarded', 'cancelled');
        EXIT WHEN finished OR clock_timestamp() >= deadline;
        PERFORM pg_sleep(least(pause, greatest(extract(epoch FROM deadline - clock_timestamp()), 0)));
        pause := least(pause * 2, 0.1);
    END LOOP;
    RETURN NEXT;
END;
$$;
