-- The packet pipeline's SQL API (docs/packets.md): the transition table and the trigger that
-- enforces it, submit, the operator actions, the worker's start/finish steps (with the
-- cross-process concurrency gate) and start-up recovery. Re-applied by every `migrate`.
--
-- Who moved a packet is read from two transaction-local settings, so that the history
-- trigger also records plain UPDATEs from psql (as the session user):
--   skiplock.packet_actor  who (default: session_user)
--   skiplock.packet_note   why (optional)
-- A submit always records session_user (the login that called it, whatever it claims).
-- The one transition the system makes behind everyone's back (processing -> queued,
-- "recovery") is made only by skiplock._packet_requeue, a SECURITY DEFINER function that
-- checks recovery's conditions itself: the guard trigger lets that move through only when it
-- runs as the table's owner, so no setting a caller can change unlocks it.
-- The history (packet_events) is append-only for every role but its owner.

-- The names this workflow's own functions enqueue under, reserved from the generic enqueue
-- (skiplock.reserved_names; sql/api/80_reserved.sql builds the checks): packet processing:
-- `packet:<id>` keys, kind `process-packet` and queue `packets` (one packet at a time across
-- all workers).
INSERT INTO skiplock.reserved_names (part, what, name, use_instead) VALUES
    ('packets', 'kind', 'process-packet', 'skiplock.submit_packet or skiplock.retry_packet'),
    ('packets', 'queue', 'packets', 'skiplock.submit_packet or skiplock.retry_packet'),
    ('packets', 'key_prefix', 'packet:', 'skiplock.submit_packet or skiplock.retry_packet')
ON CONFLICT (what, name) DO UPDATE SET part = EXCLUDED.part, use_instead = EXCLUDED.use_instead;

-- The transition table, the SQL twin of transitions::mover() in Rust (a test checks that
-- both agree on every pair): who may move a packet from `f` to `t`, or NULL if nobody may.
CREATE OR REPLACE FUNCTION skiplock._packet_mover(f skiplock.packet_state, t skiplock.packet_state)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN f = 'queued'           AND t = 'processing'       THEN 'worker'
        WHEN f = 'processing'       AND t = 'ready_for_review' THEN 'worker'
        WHEN f = 'processing'       AND t = 'error'            THEN 'worker'
        WHEN f = 'processing'       AND t = 'queued'           THEN 'recovery'
        WHEN f = 'ready_for_review' AND t = 'in_review'        THEN 'operator'
        WHEN f = 'in_review'        AND t = 'done'             THEN 'operator'
        WHEN f = 'in_review'        AND t = 'queued'           THEN 'operator'
        WHEN f = 'error'            AND t = 'queued'           THEN 'operator'
    END
$$;

-- The refusal message, worded exactly like transitions::Refused in Rust.
CREATE OR REPLACE FUNCTION skiplock._packet_refusal(id bigint, f skiplock.packet_state, t skiplock.packet_state)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('packet %s cannot go from %s to %s (from %s it may go to: %s)', id, f, t, f,
        coalesce((SELECT string_agg(s::text, ', ' ORDER BY s)
                  FROM unnest(enum_range(NULL::skiplock.packet_state)) AS s
                  WHERE skiplock._packet_mover(f, s) IN ('worker', 'operator')), 'nothing'))
$$;

-- Sets who is acting (and why) for the rest of this transaction.
CREATE OR REPLACE FUNCTION skiplock._packet_act(actor text, note text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    SELECT set_config('skiplock.packet_actor', coalesce(actor, ''), true),
           set_config('skiplock.packet_note', coalesce(note, ''), true);
$$;

-- BEFORE INSERT OR UPDATE: a packet is born queued, and `state` changes only along the table.
CREATE OR REPLACE FUNCTION skiplock._packet_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    mover text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'queued' THEN
            RAISE EXCEPTION 'skiplock: a new packet starts queued, not %', NEW.state USING ERRCODE = '22023';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id THEN
        RAISE EXCEPTION 'skiplock: packet % cannot change its id', OLD.id USING ERRCODE = '22023';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        mover := skiplock._packet_mover(OLD.state, NEW.state);
        IF mover IS NULL THEN
            RAISE EXCEPTION 'skiplock: %', skiplock._packet_refusal(OLD.id, OLD.state, NEW.state)
                USING ERRCODE = '22023';
        END IF;
        -- Only skiplock._packet_requeue (SECURITY DEFINER: it runs as the table's owner) may
        -- make recovery's move; a setting would not do, any session can change those.
        IF mover = 'recovery' AND current_user IS DISTINCT FROM (
            SELECT r.rolname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
            WHERE c.oid = TG_RELID) THEN
            RAISE EXCEPTION 'skiplock: packet % cannot go from % to % (only recovery does that, for a packet whose processing was interrupted)',
                OLD.id, OLD.state, NEW.state USING ERRCODE = '22023';
        END IF;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END;
$$;

-- AFTER INSERT OR UPDATE: the history row (also for plain UPDATEs from psql). SECURITY
-- DEFINER: the history is written only here, so no role but the owner needs (or has) any
-- write privilege on packet_events.
CREATE OR REPLACE FUNCTION skiplock._packet_history() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
        INSERT INTO skiplock.packet_events (packet_id, from_state, to_state, actor, note)
        VALUES (NEW.id,
                CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END,
                NEW.state,
                coalesce(nullif(current_setting('skiplock.packet_actor', true), ''), session_user),
                nullif(current_setting('skiplock.packet_note', true), ''));
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS packets_guard ON skiplock.packets;
CREATE TRIGGER packets_guard BEFORE INSERT OR UPDATE ON skiplock.packets
    FOR EACH ROW EXECUTE FUNCTION skiplock._packet_guard();
DROP TRIGGER IF EXISTS packets_history ON skiplock.packets;
CREATE TRIGGER packets_history AFTER INSERT OR UPDATE ON skiplock.packets
    FOR EACH ROW EXECUTE FUNCTION skiplock._packet_history();

-- The history is append-only: besides the privileges (sql/api/90_roles.sql grants the worker
-- role only SELECT), this trigger refuses UPDATE, DELETE and TRUNCATE by any role that is
-- not (a member of) the table's owner, whatever was granted to it. Deleting a packet still
-- deletes its history (the cascade runs as the owner); only the owner may delete packets.
CREATE OR REPLACE FUNCTION skiplock._packet_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_catalog.pg_has_role(current_user,
            (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID), 'MEMBER') THEN
        RAISE EXCEPTION 'skiplock: the packet history is append-only (% by % refused)', TG_OP, current_user
            USING ERRCODE = '42501';
    END IF;
    RETURN CASE TG_OP WHEN 'UPDATE' THEN NEW WHEN 'DELETE' THEN OLD END;
END;
$$;

DROP TRIGGER IF EXISTS packet_events_append_only ON skiplock.packet_events;
CREATE TRIGGER packet_events_append_only BEFORE UPDATE OR DELETE ON skiplock.packet_events
    FOR EACH ROW EXECUTE FUNCTION skiplock._packet_events_append_only();
DROP TRIGGER IF EXISTS packet_events_no_truncate ON skiplock.packet_events;
CREATE TRIGGER packet_events_no_truncate BEFORE TRUNCATE ON skiplock.packet_events
    FOR EACH STATEMENT EXECUTE FUNCTION skiplock._packet_events_append_only();

-- Enqueues the packet's process-packet job (queue `packets`) and records it on the packet.
-- The unique key (reserved: skiplock._reserved_key_prefix) keeps at most one waiting job per
-- packet; keys are namespaced by kind and queue (migrations/history/0013_enqueue_namespaces.sql), so
-- a job of another kind or queue with the same key is another job and can never make a
-- submit, a retry or recovery fail.
CREATE OR REPLACE FUNCTION skiplock._packet_enqueue(id bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    job bigint;
BEGIN
    job := skiplock._enqueue('process-packet', jsonb_build_object('packet_id', _packet_enqueue.id),
                             'packets', now(), 0::smallint, 5, 'packet:' || _packet_enqueue.id, 'keep');
    UPDATE skiplock.packets p SET job_id = job WHERE p.id = _packet_enqueue.id;
    RETURN job;
END;
$$;

-- Submits a packet: the packet (queued) and its process-packet job commit together. The
-- history records the login that called it (session_user); an `actor` argument is kept only
-- in the event's note (an enqueuer cannot sign as someone else).
CREATE OR REPLACE FUNCTION skiplock.submit_packet(source text, name text DEFAULT NULL, actor text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql 
-- Runs with the owner's rights so that the skiplock_enqueuer role needs no table privileges.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
BEGIN
    IF submit_packet.source IS NULL OR btrim(submit_packet.source) = '' THEN
        RAISE EXCEPTION 'skiplock: a packet needs a source directory' USING ERRCODE = '22023';
    END IF;
    IF length(submit_packet.source) > 4096 OR length(submit_packet.name) > 1000 THEN
        RAISE EXCEPTION 'skiplock: a packet source path may have at most 4096 characters and a name at most 1000'
            USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock._packet_act(session_user,
        CASE WHEN nullif(btrim(submit_packet.actor), '') IS NULL OR submit_packet.actor = session_user THEN 'submitted'
             ELSE format('submitted (actor given: %s)', left(submit_packet.actor, 200)) END);
    INSERT INTO skiplock.packets (source, name) VALUES (submit_packet.source, nullif(btrim(submit_packet.name), ''))
    RETURNING id INTO new_id;
    PERFORM skiplock._packet_enqueue(new_id);
    RETURN new_id;
END;
$$;

-- Moves packet `id` to `target` as `actor`; the trigger refuses what the table does not allow.
CREATE OR REPLACE FUNCTION skiplock._packet_move(id bigint, target skiplock.packet_state, actor text, note text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    cur skiplock.packet_state;
BEGIN
    SELECT p.state INTO cur FROM skiplock.packets p WHERE p.id = _packet_move.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: packet % does not exist', _packet_move.id USING ERRCODE = 'P0002';
    END IF;
    -- The trigger lets an UPDATE that leaves the state as it is through (other columns may
    -- change); an operator action to the state the packet is already in is a refused move
    -- (two operators must not both "take" one packet).
    IF cur = _packet_move.target THEN
        RAISE EXCEPTION 'skiplock: %', skiplock._packet_refusal(_packet_move.id, cur, _packet_move.target)
            USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock._packet_act(_packet_move.actor, _packet_move.note);
    UPDATE skiplock.packets p SET state = _packet_move.target WHERE p.id = _packet_move.id;
END;
$$;

-- The three operator actions run with the owner's rights (SECURITY DEFINER, fixed
-- search_path, every name qualified), so the operator role (skiplock_operator, the console's
-- login) moves packets without any write privilege on the tables. They still make only the
-- operator's moves of the table (none of them can make recovery's processing -> queued, which
-- the guard trigger would otherwise allow as the owner), and the history records the calling
-- login (session_user) unless an actor is given.

-- Operator: take a packet that is ready for review.
CREATE OR REPLACE FUNCTION skiplock.take_packet(id bigint, actor text DEFAULT NULL)
RETURNS void LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT skiplock._packet_move(take_packet.id, 'in_review', take_packet.actor, 'taken for review');
$$;

-- Operator: the review is done.
CREATE OR REPLACE FUNCTION skiplock.complete_packet(id bigint, actor text DEFAULT NULL)
RETURNS void LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT skiplock._packet_move(complete_packet.id, 'done', complete_packet.actor, 'completed');
$$;

-- Operator: process again (from error, or from in_review after a reshoot / edited frames).
-- Returns the new process-packet job.
CREATE OR REPLACE FUNCTION skiplock.retry_packet(id bigint, reason text DEFAULT NULL, actor text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur skiplock.packet_state;
BEGIN
    SELECT p.state INTO cur FROM skiplock.packets p WHERE p.id = retry_packet.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'skiplock: packet % does not exist', retry_packet.id USING ERRCODE = 'P0002';
    END IF;
    -- Only the operator's rows of the table: processing -> queued belongs to recovery.
    IF skiplock._packet_mover(cur, 'queued') IS DISTINCT FROM 'operator' THEN
        RAISE EXCEPTION 'skiplock: %', skiplock._packet_refusal(retry_packet.id, cur, 'queued') USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock._packet_act(retry_packet.actor, coalesce('retry: ' || nullif(btrim(retry_packet.reason), ''), 'retry'));
    UPDATE skiplock.packets p SET state = 'queued', error = NULL, result = NULL WHERE p.id = retry_packet.id;
    RETURN skiplock._packet_enqueue(retry_packet.id);
END;
$$;

-- Recovery's move, processing -> queued, and the only way to make it (the guard trigger
-- allows it only as the table's owner, which this SECURITY DEFINER function runs as). It
-- checks recovery's conditions itself, so calling it directly cannot do more: the packet must
-- be processing, and either its job is no longer live (not available or running: the worker
-- died and the job is gone), or `job_id` is that job and it is running (rescued and claimed
-- again, or its worker is shutting down). Returns whether the packet moved.
CREATE OR REPLACE FUNCTION skiplock._packet_requeue(id bigint, job_id bigint, note text)
RETURNS boolean LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    cur skiplock.packet_state;
    cur_job bigint;
    js skiplock.job_state;
BEGIN
    SELECT p.state, p.job_id INTO cur, cur_job FROM skiplock.packets p WHERE p.id = _packet_requeue.id FOR NO KEY UPDATE;
    IF NOT FOUND OR cur <> 'processing' THEN
        RETURN false;
    END IF;
    SELECT j.state INTO js FROM skiplock.jobs j WHERE j.id = cur_job;
    IF js IN ('available', 'running')
       AND NOT coalesce(js = 'running' AND cur_job = _packet_requeue.job_id, false) THEN
        RETURN false;
    END IF;
    PERFORM skiplock._packet_act('recovery', _packet_requeue.note);
    UPDATE skiplock.packets p SET state = 'queued' WHERE p.id = _packet_requeue.id;
    RETURN true;
END;
$$;

-- Worker: try to start processing packet `id` for job `job_id`, keeping at most
-- `max_processing` packets in `processing` across every process. Starts are serialised by
-- the row 'packets.processing' of skiplock.locks, locked BEFORE counting, so two workers can
-- never both see room for one more. The row is taken with SKIP LOCKED, never waited for (no
-- other session can hold a start up); the gate is held only for this short transaction, and
-- a start that finds it held answers 'busy' like one that finds no room (the job snoozes and
-- asks again; older workers understand the answer too).
-- Returns a skiplock.packet_start_result (migrations/history/0007_store.sql): outcome 'started',
-- 'busy' (no room, or the gate is held: wait and try again), 'stale' with the packet's
-- `state` when it is no longer queued (NULL state: it is gone; a late job: do nothing), or
-- 'duplicate' with the `owner_job` when another live job owns the queued packet (do nothing).
-- A packet still `processing` for this very job was interrupted (its worker died, the job was
-- rescued): it goes back to queued through recovery and starts again like any other.
-- (Until API version 1 it returned the same as text, 'stale:<state>' and 'duplicate:<job>':
-- that version is dropped once.)
DO $drop$
BEGIN
    IF (SELECT p.prorettype FROM pg_catalog.pg_proc p
        WHERE p.oid = pg_catalog.to_regprocedure('skiplock._packet_start(bigint, bigint, integer, text)'))
       = 'text'::regtype THEN
        DROP FUNCTION skiplock._packet_start(bigint, bigint, integer, text);
    END IF;
END;
$drop$;
CREATE OR REPLACE FUNCTION skiplock._packet_start(id bigint, job_id bigint, max_processing integer, worker text)
RETURNS skiplock.packet_start_result LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    cur skiplock.packet_state;
    cur_job bigint;
    n bigint;
BEGIN
    PERFORM 1 FROM skiplock.locks l WHERE l.name = 'packets.processing' FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT 1 FROM skiplock.locks l WHERE l.name = 'packets.processing') THEN
            -- The row was deleted: put it back (migration 0006 made it).
            INSERT INTO skiplock.locks (name) VALUES ('packets.processing') ON CONFLICT DO NOTHING;
            PERFORM 1 FROM skiplock.locks l WHERE l.name = 'packets.processing' FOR UPDATE SKIP LOCKED;
        END IF;
        IF NOT FOUND THEN
            RETURN ('busy', NULL, NULL)::skiplock.packet_start_result;
        END IF;
    END IF;
    SELECT p.state, p.job_id INTO cur, cur_job FROM skiplock.packets p WHERE p.id = _packet_start.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN ('stale', NULL, NULL)::skiplock.packet_start_result;
    END IF;
    IF cur = 'processing' AND cur_job = _packet_start.job_id
       AND skiplock._packet_requeue(_packet_start.id, _packet_start.job_id,
               format('job %s was interrupted while processing; processing again', cur_job)) THEN
        cur := 'queued';
    END IF;
    IF cur <> 'queued' THEN
        RETURN ('stale', cur, NULL)::skiplock.packet_start_result;
    END IF;
    -- Another live job owns the packet: this one is a duplicate.
    IF cur_job IS DISTINCT FROM _packet_start.job_id AND EXISTS (
        SELECT 1 FROM skiplock.jobs j WHERE j.id = cur_job AND j.state IN ('available', 'running')) THEN
        RETURN ('duplicate', cur, cur_job)::skiplock.packet_start_result;
    END IF;
    -- Only packets whose job is running count: one left in processing by a job that is gone
    -- (cancelled, discarded, rescued back to available) is not processing anything.
    SELECT count(*) INTO n FROM skiplock.packets p JOIN skiplock.jobs j ON j.id = p.job_id
    WHERE p.state = 'processing' AND j.state = 'running';
    IF n >= _packet_start.max_processing THEN
        RETURN ('busy', NULL, NULL)::skiplock.packet_start_result;
    END IF;
    PERFORM skiplock._packet_act(_packet_start.worker, format('job %s', _packet_start.job_id));
    UPDATE skiplock.packets p SET state = 'processing', job_id = _packet_start.job_id, error = NULL, result = NULL
    WHERE p.id = _packet_start.id;
    RETURN ('started', 'processing', _packet_start.job_id)::skiplock.packet_start_result;
END;
$$;

-- A processing slot was freed: bring the earliest packet job waiting for one (snoozed
-- with 'busy') forward to now, so waiting packets need not poll for a slot.
CREATE OR REPLACE FUNCTION skiplock._packet_wake_one() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    next_job bigint;
    q text;
BEGIN
    SELECT j.id, j.queue INTO next_job, q FROM skiplock.jobs j
    WHERE j.kind = 'process-packet' AND j.state = 'available' AND j.scheduled_at > now()
    ORDER BY j.scheduled_at, j.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
    IF next_job IS NOT NULL THEN
        UPDATE skiplock.jobs j SET scheduled_at = now() WHERE j.id = next_job;
        -- Moved earlier: its lane may sleep until its old time (skiplock._lanes_need).
        PERFORM skiplock._lanes_need(ARRAY[j.queue], ARRAY[j.priority], ARRAY[j.limit_key], ARRAY[j.scheduled_at])
        FROM skiplock.jobs j WHERE j.id = next_job;
        PERFORM pg_notify(skiplock._wake_channel(), q);
    END IF;
END;
$$;

-- Worker: record the end of processing (fenced: only while the packet is still processing
-- for this job). Returns a skiplock.packet_finish_result: recorded with the new state, or not
-- recorded with the state the packet was found in when it had been taken away (NULL: gone).
-- Wakes one packet job that is waiting for a free slot, so it need not sleep out its snooze.
-- (Until API version 1 it returned text, 'lost:<state>': that version is dropped once.)
DO $drop$
BEGIN
    IF (SELECT p.prorettype FROM pg_catalog.pg_proc p
        WHERE p.oid = pg_catalog.to_regprocedure('skiplock._packet_finish(bigint, bigint, boolean, jsonb, text, text)'))
       = 'text'::regtype THEN
        DROP FUNCTION skiplock._packet_finish(bigint, bigint, boolean, jsonb, text, text);
    END IF;
END;
$drop$;
CREATE OR REPLACE FUNCTION skiplock._packet_finish(id bigint, job_id bigint, ok boolean, result jsonb, error text, worker text)
RETURNS skiplock.packet_finish_result LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    cur skiplock.packet_state;
    cur_job bigint;
BEGIN
    SELECT p.state, p.job_id INTO cur, cur_job FROM skiplock.packets p WHERE p.id = _packet_finish.id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN (false, NULL)::skiplock.packet_finish_result;
    END IF;
    IF cur <> 'processing' OR cur_job IS DISTINCT FROM _packet_finish.job_id THEN
        RETURN (false, cur)::skiplock.packet_finish_result;
    END IF;
    PERFORM skiplock._packet_act(_packet_finish.worker,
        CASE WHEN _packet_finish.ok THEN format('job %s', _packet_finish.job_id)
             ELSE format('job %s: %s', _packet_finish.job_id, left(_packet_finish.error, 200)) END);
    UPDATE skiplock.packets p
    SET state = CASE WHEN _packet_finish.ok THEN 'ready_for_review' ELSE 'error' END::skiplock.packet_state,
        result = _packet_finish.result,
        error = _packet_finish.error
    WHERE p.id = _packet_finish.id;
    PERFORM skiplock._packet_wake_one();
    RETURN (true, CASE WHEN _packet_finish.ok THEN 'ready_for_review'::skiplock.packet_state
                       ELSE 'error'::skiplock.packet_state END)::skiplock.packet_finish_result;
END;
$$;

-- Worker: processing was interrupted on purpose (the worker is shutting down): the packet
-- goes back to queued through recovery; its job is given back to the queue by the worker.
CREATE OR REPLACE FUNCTION skiplock._packet_interrupt(id bigint, job_id bigint, note text)
RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM skiplock.packets p
               WHERE p.id = _packet_interrupt.id AND p.job_id = _packet_interrupt.job_id)
       AND skiplock._packet_requeue(_packet_interrupt.id, _packet_interrupt.job_id, _packet_interrupt.note) THEN
        PERFORM skiplock._packet_wake_one();
        RETURN true;
    END IF;
    RETURN false;
END;
$$;

-- Start-up recovery: every queued or processing packet without a live job (its job_id is not
-- an available or running job) goes back to queued (recorded in the history when it was
-- processing) and gets a new job. ready_for_review and later are never touched. A running
-- job of a dead worker still counts as live: the rescuer returns it, and _packet_start
-- resumes the packet. Each packet is recovered on its own (a subtransaction): one that
-- fails is returned with its `error` and no job, and the others are recovered all the same.
-- Returns what it did. (Release 0.1.0's version had no `error` column: replaced once.)
DO $drop$
BEGIN
    IF pg_catalog.to_regprocedure('skiplock.recover_packets()') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                       WHERE p.oid = pg_catalog.to_regprocedure('skiplock.recover_packets()')
                         AND 'error' = ANY (p.proargnames)) THEN
        DROP FUNCTION skiplock.recover_packets();
    END IF;
END;
$drop$;
CREATE OR REPLACE FUNCTION skiplock.recover_packets()
RETURNS TABLE (packet_id bigint, was skiplock.packet_state, job_id bigint, error text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.id, p.state, p.job_id FROM skiplock.packets p
        WHERE p.state IN ('queued', 'processing')
          AND NOT EXISTS (SELECT 1 FROM skiplock.jobs j
                          WHERE j.id = p.job_id AND j.state IN ('available', 'running'))
        ORDER BY p.id
        FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        packet_id := r.id;
        was := r.state;
        BEGIN
            IF r.state = 'processing' THEN
                PERFORM skiplock._packet_requeue(r.id, NULL,
                    format('recovered at worker start-up: job %s is no longer live', coalesce(r.job_id::text, '-')));
            END IF;
            job_id := skiplock._packet_enqueue(r.id);
            error := NULL;
        EXCEPTION WHEN OTHERS THEN
            job_id := NULL;
            error := SQLERRM;
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- "Whose move is it?": packets waiting on the machine and on people.
CREATE OR REPLACE VIEW skiplock.packet_whose_move AS
SELECT count(*) FILTER (WHERE state IN ('queued', 'processing')) AS machine,
       count(*) FILTER (WHERE state IN ('ready_for_review', 'in_review', 'error')) AS people,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'processing') AS processing,
       count(*) FILTER (WHERE state = 'ready_for_review') AS ready_for_review,
       count(*) FILTER (WHERE state = 'in_review') AS in_review,
       count(*) FILTER (WHERE state = 'error') AS error,
       count(*) FILTER (WHERE state = 'done') AS done
FROM skiplock.packets;
