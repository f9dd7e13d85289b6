-- pack SQL API: the debounced pack timer of a host is its single available `do-the-packing`
-- row (unique_key 'pack:<host>', queue 'pack'). Nothing is held in any process's memory.

-- The names this workflow's own functions enqueue under, reserved from the generic enqueue
-- (skiplock.reserved_names; sql/api/80_reserved.sql builds the checks): the pack timer:
-- `pack:<host>` keys, its kinds and queue `pack`.
INSERT INTO skiplock.reserved_names (part, what, name, use_instead) VALUES
    ('pack', 'kind', 'timer-reset', 'skiplock.timer_reset or skiplock.pack_now'),
    ('pack', 'kind', 'do-the-packing', 'skiplock.timer_reset or skiplock.pack_now'),
    ('pack', 'queue', 'pack', 'skiplock.timer_reset or skiplock.pack_now'),
    ('pack', 'key_prefix', 'pack:', 'skiplock.timer_reset or skiplock.pack_now')
ON CONFLICT (what, name) DO UPDATE SET part = EXCLUDED.part, use_instead = EXCLUDED.use_instead;

-- The unique key of a host's pack timer.
CREATE OR REPLACE FUNCTION skiplock.pack_key(host text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'pack:' || host $$;

-- Hosts are compared as the fetch workflow writes them: lower case, trimmed, never empty.
CREATE OR REPLACE FUNCTION skiplock._pack_host(host text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    h text := lower(btrim(coalesce(host, '')));
BEGIN
    IF h = '' THEN
        RAISE EXCEPTION 'skiplock: host must not be empty' USING ERRCODE = '22023';
    END IF;
    IF length(h) > 300 THEN
        RAISE EXCEPTION 'skiplock: a host is at most 300 characters long, got %', length(h) USING ERRCODE = '22023';
    END IF;
    IF h ~ '[/\s]' THEN
        RAISE EXCEPTION 'skiplock: % is not a host (write e.g. example.com or 127.0.0.1:8080)', quote_literal(host)
            USING ERRCODE = '22023';
    END IF;
    RETURN h;
END;
$$;

-- Announce that a host's content changed: enqueues a `timer-reset` job (queue 'pack'),
-- whose handler pushes the host's pack timer forward. Returns the timer-reset job's id.
CREATE OR REPLACE FUNCTION skiplock.timer_reset(host text) RETURNS bigint
LANGUAGE plpgsql 
-- Runs with the owner's rights so that the skiplock_enqueuer role needs no table privileges.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- skiplock._enqueue, not skiplock.enqueue: the pack queue and its kinds are reserved to
    -- these functions (skiplock._reserved_job).
    RETURN skiplock._enqueue('timer-reset', jsonb_build_object('host', skiplock._pack_host(timer_reset.host)), 'pack',
                             now(), 0::smallint, 25, NULL, 'keep');
END;
$$;

-- The debounce rule, in one place: when a host's pack timer fires after a reset at `now`.
-- `quiet` after the latest reset, but never later than `max_wait` after the first reset of
-- the window (`window_start`, the timer row's created_at), and never earlier than it already
-- fires (`fires_at`: resets committed out of order must not pull the timer back). A reset
-- that creates the timer passes NULL for both. tests/pack.rs checks it on a table of cases.
CREATE OR REPLACE FUNCTION skiplock._pack_next_fire(now timestamptz, quiet interval, max_wait interval,
                                                    window_start timestamptz, fires_at timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN window_start IS NULL THEN least(now + quiet, now + max_wait)
                ELSE greatest(fires_at, least(now + quiet, window_start + max_wait)) END
$$;

-- Arm (or push forward) a host's pack timer in one statement, safe under any number of
-- concurrent callers, by the rule of skiplock._pack_next_fire. A timer brought to now by
-- pack_now (args.now) is left where it is. Returns the timer's id and when it fires (taken
-- from RETURNING: a query around the call could not see a row another session just made).
CREATE OR REPLACE FUNCTION skiplock.pack_arm_at(host text, quiet interval, max_wait interval,
                                                OUT timer_id bigint, OUT fires_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    h text := skiplock._pack_host(pack_arm_at.host);
BEGIN
    -- The fire time stays a time skiplock can store (skiplock._time_ok).
    IF pack_arm_at.quiet IS NULL OR pack_arm_at.quiet < interval '0' OR pack_arm_at.quiet > interval '100 years'
       OR pack_arm_at.max_wait IS NULL OR pack_arm_at.max_wait < interval '0' OR pack_arm_at.max_wait > interval '100 years' THEN
        RAISE EXCEPTION 'skiplock: quiet and max_wait must be durations from 0s to 100 years' USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock._check_time('the pack timer', clock_timestamp() + least(pack_arm_at.quiet, pack_arm_at.max_wait));
    -- limit_key: the host (the pack queue's per-key concurrency 1: one pack per host runs).
    INSERT INTO skiplock.jobs AS j (kind, args, queue, scheduled_at, unique_key, limit_key)
    VALUES ('do-the-packing', jsonb_build_object('host', h), 'pack',
            skiplock._pack_next_fire(clock_timestamp(), pack_arm_at.quiet, pack_arm_at.max_wait, NULL, NULL),
            skiplock.pack_key(h), h)
    ON CONFLICT (kind, queue, unique_key) WHERE state = 'available' AND unique_key IS NOT NULL
    DO UPDATE SET scheduled_at = CASE
            WHEN coalesce((j.args ->> 'now')::boolean, false) THEN j.scheduled_at
            -- clock_timestamp(), not now(): the time this reset lands.
            ELSE skiplock._pack_next_fire(clock_timestamp(), pack_arm_at.quiet, pack_arm_at.max_wait,
                                          j.created_at, j.scheduled_at)
        END
    RETURNING j.id, j.scheduled_at INTO timer_id, fires_at;
END;
$$;

-- pack_arm_at, returning only the timer's id.
CREATE OR REPLACE FUNCTION skiplock.pack_arm(host text, quiet interval, max_wait interval) RETURNS bigint
LANGUAGE sql AS $$
    SELECT a.timer_id FROM skiplock.pack_arm_at(host, quiet, max_wait) AS a
$$;

-- Pack a host at once: the host's pending timer (if any) is brought to now and marked
-- {"now": true} so it packs even if a reset arrives meanwhile; otherwise a new one is made.
-- Returns the do-the-packing job's id. A host with no fetched page is refused: a pack of it
-- would only write an empty artifact (and a `packs` row) per call, without limit.
CREATE OR REPLACE FUNCTION skiplock.pack_now(host text) RETURNS bigint
LANGUAGE plpgsql 
-- Runs with the owner's rights so that the skiplock_enqueuer role needs no table privileges.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    h text := skiplock._pack_host(pack_now.host);
    timer_id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM skiplock.pages p WHERE p.host = h) THEN
        RAISE EXCEPTION 'skiplock: host % has no fetched pages: nothing to pack', quote_literal(h)
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO skiplock.jobs AS j (kind, args, queue, scheduled_at, unique_key, limit_key)
    VALUES ('do-the-packing', jsonb_build_object('host', h, 'now', true), 'pack', now(), skiplock.pack_key(h), h)
    ON CONFLICT (kind, queue, unique_key) WHERE state = 'available' AND unique_key IS NOT NULL
    DO UPDATE SET scheduled_at = least(j.scheduled_at, now()),
                  args = j.args || jsonb_build_object('now', true)
    RETURNING j.id INTO timer_id;
    -- The insert trigger wakes workers only for inserted rows; an updated timer needs this.
    PERFORM pg_notify(skiplock._wake_channel(), 'pack');
    RETURN timer_id;
END;
$$;

-- A claimed timer stops being the host's timer by itself: the unique index covers only
-- available rows, so a reset during a pack arms a new one. A failed pack going back to
-- available next to that new timer is superseded by it (the statements that send jobs back:
-- skiplock._superseded_by, sql/api/11_enqueue.sql), and the new timer packs everything. An
-- earlier pack-specific trigger that cleared the key on claim is dropped here.
DROP TRIGGER IF EXISTS jobs_pack_release_key ON skiplock.jobs;
DROP FUNCTION IF EXISTS skiplock._pack_release_key();

-- Per host: the last pack and the pending timer, for psql and `skiplock pack --status`.
CREATE OR REPLACE VIEW skiplock.pack_status AS
SELECT coalesce(p.host, t.host) AS host,
       p.packed_at, p.pages, p.bytes, p.object_key, p.store, p.pack_count, p.job_id,
       t.id AS timer_job_id, t.scheduled_at AS timer_at
FROM skiplock.packs p
FULL JOIN (
    SELECT j.args ->> 'host' AS host, j.id, j.scheduled_at
    FROM skiplock.jobs j
    WHERE j.kind = 'do-the-packing' AND j.state = 'available' AND j.unique_key IS NOT NULL
) t ON t.host = p.host;

-- The pack queue's per-key concurrency of 1 (one pack per host runs at a time; do-the-packing
-- jobs carry their host as limit_key), a rate an operator set on the queue kept: what a
-- worker's pack start hook sets. The worker role may not call the key-limit setters
-- (sql/api/90_roles.sql: the queue controls are the owner's), so it does this through here.
CREATE OR REPLACE FUNCTION skiplock.set_one_pack_per_host()
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM skiplock.change_key_limit('pack', true, 1, false, NULL, NULL);
END;
$$;
