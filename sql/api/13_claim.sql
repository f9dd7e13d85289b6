-- skiplock core SQL API: the claim: a queue's lanes read in priority order (skiplock._claim).
-- Installed (CREATE OR REPLACE) by `skiplock migrate` after the schema migrations, in the order of
-- src/store/schema.rs (api_files).

-- How many lanes one claim reads at most (skiplock._claim_lanes): a claim's work stays
-- bounded whatever the number of lanes a queue has, and one that reached this many without
-- filling its batch says where the next claim resumes.
CREATE OR REPLACE FUNCTION skiplock._claim_max_lanes() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 64 $$;

-- The claim's pick (skiplock._claim, and skiplock._claim_limited under a queue concurrency
-- limit): up to `want` due jobs of `kinds` in queue `q`, locked FOR NO KEY UPDATE SKIP LOCKED,
-- in claim order (priority, then scheduled_at, then id); their ctids and ids, the lanes read
-- to their end (`read_out`), and where the next claim resumes when this one stopped at
-- skiplock._claim_max_lanes lanes (`more_after`; NULL: it read every lane it had to). No key
-- update: it does not conflict with the FOR KEY SHARE an enqueue takes on the jobs it depends
-- on (skiplock._add_dependencies), so an enqueuer's open transaction never hides a due job
-- from the claim.
--
-- Lanes. Each priority of a queue is a lane (skiplock.lanes); a lane is read from
-- `lane_since` on (per lane in `lane_priority`; a lane not named is read from its start), not
-- from the head of jobs_claim_idx. The index keeps an entry for every job claimed since the
-- vacuum horizon was pinned (a long transaction, a REPEATABLE READ report, a replication slot
-- left behind): dead to everyone, but vacuum may not remove it, and a scan from the head has
-- to step over each one, so without the bound every claim would cost more with every job run
-- since (docs/internals.md, "Claims when Postgres cannot vacuum"). The worker keeps where each
-- lane's scan may start (src/worker/cursor.rs): a little before the clock of its last claim
-- that found the lane empty. NULL arrays: every lane from its start; the worker sends such a
-- claim first, after a failure, and then as often as its cost allows.
--
-- Only the lanes a job may be due in are read: the awake ones and those whose `due_at` has
-- come (migrations/core/0011_sleeping_lanes.sql), in priority order, after `after_lane` (NULL:
-- from the first), at most skiplock._claim_max_lanes of them: a lane whose jobs are all due
-- later, or that has none left, costs nothing, and however many lanes a queue has (an
-- enqueuer may use all 65,536 priorities) one claim reads at most that many. One probe of each
-- lane index to list them, then one probe of jobs_claim_idx per lane read.
DROP FUNCTION IF EXISTS skiplock._claim_lanes(text, text[], integer, smallint[], timestamptz[]);
CREATE OR REPLACE FUNCTION skiplock._claim_lanes(q text, kinds text[], want integer,
                                                 lane_priority smallint[], lane_since timestamptz[],
                                                 after_lane smallint,
                                                 OUT tids tid[], OUT ids bigint[], OUT read_out smallint[],
                                                 OUT more_after smallint)
-- See skiplock._claim: plans kept from the function's first calls must not scan the table.
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
DECLARE
    lane record;
    lanes smallint[];
    got_tids tid[];
    got_ids bigint[];
    max_lanes constant integer := skiplock._claim_max_lanes();
BEGIN
    tids := '{}';
    ids := '{}';
    read_out := '{}';
    IF coalesce(want, 0) <= 0 OR coalesce(cardinality(kinds), 0) = 0 THEN
        RETURN;
    END IF;
    lanes := ARRAY(
        SELECT DISTINCT u.p FROM (
            (SELECT l.priority AS p FROM skiplock.lanes l
             WHERE l.queue = q AND l.due_at IS NULL AND l.priority > coalesce(after_lane::integer, -32769)
             ORDER BY l.priority LIMIT max_lanes)
            UNION ALL
            (SELECT l.priority FROM skiplock.lanes l
             WHERE l.queue = q AND l.due_at <= now() AND l.priority > coalesce(after_lane::integer, -32769)
             ORDER BY l.due_at LIMIT max_lanes)
        ) u
        ORDER BY 1 LIMIT max_lanes);
    FOR lane IN
        SELECT u.p, coalesce(c.since, '-infinity') AS since
        FROM unnest(lanes) AS u(p)
        LEFT JOIN unnest(lane_priority, lane_since) AS c(p, since) ON c.p = u.p
        ORDER BY u.p
    LOOP
        SELECT coalesce(array_agg(x.ctid), '{}'), coalesce(array_agg(x.id), '{}')
        INTO got_tids, got_ids
        FROM (SELECT j.ctid, j.id FROM skiplock.jobs j
              WHERE j.state = 'available' AND j.queue = q AND j.priority = lane.p
                AND j.scheduled_at >= lane.since AND j.scheduled_at <= now()
                AND j.kind = ANY(kinds)
              ORDER BY j.scheduled_at, j.id
              LIMIT want - cardinality(ids)
              FOR NO KEY UPDATE SKIP LOCKED) x;
        tids := tids || got_tids;
        ids := ids || got_ids;
        EXIT WHEN cardinality(ids) >= want;
        read_out := read_out || lane.p;
    END LOOP;
    IF cardinality(ids) < want AND cardinality(lanes) >= max_lanes THEN
        more_after := lanes[cardinality(lanes)];
    END IF;
END;
$$;

-- The claim (sql/queue/claim.sql calls it): up to n + ahead due jobs of `kinds` from queue `q`
-- move to `running` for `worker`, in claim order, each lane read from its bound
-- (skiplock._claim_lanes says how and why), with SKIP LOCKED so many workers claim side by
-- side. A queue with a row in skiplock.queues (limited or paused) is claimed through
-- skiplock._claim_limited instead (n for free slots, `ahead` more for the worker's buffer,
-- within its limits).
--
-- `attempted_at` (API 8) is the start of the handler (docs/internals.md, "When a job
-- started"): the claim writes its clock for the n jobs that start at once and NULL for those
-- claimed ahead into the worker's buffer; the heartbeat and the ack write each job's start as
-- the worker saw it (skiplock._heartbeat, skiplock._ack).
--
-- Returns the claimed jobs, then one row with id NULL: the claim's clock (`attempted_at`) and
-- the lanes it read to their end (`exhausted`), where the next claim resumes (`lanes_after`,
-- API 9: the claim stopped at skiplock._claim_max_lanes lanes without filling its batch; the
-- worker claims again at once from there), and for a controlled queue what
-- skiplock._claim_limited reports (`controlled`, `wait_until`, `buffer_room`; its clock is
-- NULL when its pick did not go lane by lane, and the worker's bounds then stay as they were).
--
-- A row whose attempt counter is already at its maximum (2147483647: only a trusted role can
-- write one) keeps it rather than failing every claim of its queue on `integer out of range`;
-- store::claim discards such a row with the reason (sql/queue/discard_overflow.sql).
--
-- tags and meta (API 8) are returned with each job; `after_lane` (API 9) is an argument and
-- `lanes_after` a column: the forms of earlier versions are dropped first.
DROP FUNCTION IF EXISTS skiplock._claim(text, text[], integer, text, integer, smallint[], timestamptz[]);
DROP FUNCTION IF EXISTS skiplock._claim_limited(text, text[], integer, text, integer, smallint[], timestamptz[]);
CREATE OR REPLACE FUNCTION skiplock._claim(q text, kinds text[], n integer, worker text, ahead integer,
                                           lane_priority smallint[], lane_since timestamptz[],
                                           after_lane smallint DEFAULT NULL)
RETURNS TABLE (id bigint, kind text, queue text, args jsonb, priority smallint, attempt integer,
               max_attempts integer, scheduled_at timestamptz, created_at timestamptz,
               attempted_at timestamptz, tags text[], meta jsonb, controlled boolean,
               wait_until timestamptz, buffer_room integer, exhausted smallint[],
               lanes_after smallint)
-- A function's statements keep the plans made at its first calls. The claim's UPDATE finds
-- its rows by ctid; planned while the table was nearly empty (a new database, or right after
-- a TRUNCATE), a sequential scan would look as cheap and stay the plan while the table grows,
-- reading every row at every claim. Without sequential scans the plan is the TID scan however
-- small the table was.
SET enable_seqscan = off
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    pick record;
    -- The picked rows that start at once (one per free slot): their start is the claim's.
    started tid[];
BEGIN
    IF EXISTS (SELECT 1 FROM skiplock.queues c WHERE c.queue = q) THEN
        RETURN QUERY SELECT l.* FROM skiplock._claim_limited(q, kinds, n, worker, ahead,
                                                             lane_priority, lane_since, after_lane) l;
        RETURN;
    END IF;
    SELECT * INTO pick FROM skiplock._claim_lanes(
        q, kinds, greatest(coalesce(n, 0), 0) + greatest(coalesce(ahead, 0), 0),
        lane_priority, lane_since, after_lane);
    started := pick.tids[1:greatest(coalesce(n, 0), 0)];
    RETURN QUERY
    UPDATE skiplock.jobs j
    SET state = 'running',
        attempt = least(j.attempt, 2147483646) + 1,
        -- The first n of the pick start at once; the others wait in the worker's buffer, and
        -- show it: running with no attempted_at until the worker reports their start.
        attempted_at = CASE WHEN j.ctid = ANY (started) THEN now() END,
        attempted_by = worker,
        heartbeat_at = now()
    WHERE j.ctid = ANY(pick.tids)
    RETURNING j.id, j.kind, j.queue, j.args, j.priority, j.attempt, j.max_attempts,
              j.scheduled_at, j.created_at, j.attempted_at, j.tags, j.meta, false,
              NULL::timestamptz, NULL::integer, NULL::smallint[], NULL::smallint;
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::smallint, NULL::integer,
                        NULL::integer, NULL::timestamptz, NULL::timestamptz, now(), NULL::text[],
                        NULL::jsonb, false, NULL::timestamptz, NULL::integer, pick.read_out,
                        pick.more_after;
END;
$$;
