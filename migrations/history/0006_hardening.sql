-- Hardening (docs/security.md), the schema side: times, reserved keys, coordination rows, limits.
-- Runs on a fresh database and on one migrated by an earlier release: it first repairs rows
-- an old database may hold (each repair says what it does and why), then adds the
-- constraints that make such rows impossible from now on.

--------------------------------------------------------------------------------------------
-- 1. Times
--------------------------------------------------------------------------------------------
-- skiplock stores only times from 1970-01-01 00:00:00 UTC to the end of year 9999. This
-- function is the one place SQL states that range (its Rust twin is src/dbtime.rs; a test
-- checks they agree at the edges). A CHECK on every timestamptz column calls it, so
-- 'infinity', '-infinity' and absurd years are refused even in a superuser's plain INSERT;
-- the SQL API refuses them earlier with a `skiplock: …` error (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION skiplock._time_ok(t timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t >= '1970-01-01 00:00:00+00'::timestamptz AND t < '10000-01-01 00:00:00+00'::timestamptz
$$;

-- The nearest time inside the range (NULL stays NULL), for the repairs below: `-infinity` and
-- anything before 1970 become 1970-01-01 (still "due long ago", first in line as before);
-- `infinity` and anything after 9999 become 9999-12-31 23:59:59.999999 (still "never").
CREATE OR REPLACE FUNCTION skiplock._time_clamp(t timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t < '1970-01-01 00:00:00+00'::timestamptz THEN '1970-01-01 00:00:00+00'::timestamptz
                WHEN t >= '10000-01-01 00:00:00+00'::timestamptz THEN '9999-12-31 23:59:59.999999+00'::timestamptz
                ELSE t END
$$;

--------------------------------------------------------------------------------------------
-- 2. Repairs (no-ops on a fresh database)
--------------------------------------------------------------------------------------------

-- Squatted workflow keys. The unique-key prefixes `fetch:`, `pack:` and `packet:` belong to
-- the built-in workflows (only their own functions may create or replace such keys from now
-- on, sql/api/10_core.sql). Earlier releases let any enqueuer take them: a waiting job that
-- holds one with another kind or queue, or with args that do not match its key, was put
-- there by a caller, not by the workflow. It is cancelled, with the reason in its errors, so
-- the workflow can use its key again (docs/security.md: squatted keys stopped worker start-up and
-- blocked packet submissions; `replace` steered pending fetches and pack timers).
UPDATE skiplock.jobs j
SET state = 'cancelled',
    finalized_at = now(),
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'at', now(),
        'error', format('cancelled on upgrade: unique_key %s is reserved for a built-in workflow, and this %s job in queue %s is not that workflow''s',
                        j.unique_key, j.kind, j.queue)))
WHERE j.state = 'available'
  AND ((starts_with(j.unique_key, 'fetch:')
        AND NOT (j.kind = 'fetch' AND j.queue = 'fetch'
                 AND coalesce(j.args ->> 'url', '') = substr(j.unique_key, 7)))
    OR (starts_with(j.unique_key, 'pack:')
        AND NOT (j.kind = 'do-the-packing' AND j.queue = 'pack'
                 AND coalesce(j.args ->> 'host', '') = substr(j.unique_key, 6)))
    OR (starts_with(j.unique_key, 'packet:')
        AND NOT (j.kind = 'process-packet' AND j.queue = 'packets'
                 AND coalesce(j.args ->> 'packet_id', '') = substr(j.unique_key, 8))));

-- A workflow's own waiting job parked at a non-finite or absurd time (a pack timer or a
-- pending fetch pushed to 'infinity' through `replace`) would keep its key, and so the
-- workflow, blocked until the end of time: it becomes due now instead.
UPDATE skiplock.jobs j
SET scheduled_at = now()
WHERE j.state = 'available'
  AND NOT skiplock._time_ok(j.scheduled_at)
  AND (starts_with(j.unique_key, 'fetch:') OR starts_with(j.unique_key, 'pack:')
       OR starts_with(j.unique_key, 'packet:'));

-- Every other time outside the range is clamped (see skiplock._time_clamp).
UPDATE skiplock.jobs
SET scheduled_at = skiplock._time_clamp(scheduled_at),
    created_at   = skiplock._time_clamp(created_at),
    attempted_at = skiplock._time_clamp(attempted_at),
    heartbeat_at = skiplock._time_clamp(heartbeat_at),
    finalized_at = skiplock._time_clamp(finalized_at)
WHERE NOT (skiplock._time_ok(scheduled_at) AND skiplock._time_ok(created_at))
   OR NOT skiplock._time_ok(attempted_at) OR NOT skiplock._time_ok(heartbeat_at)
   OR NOT skiplock._time_ok(finalized_at);

UPDATE skiplock.workers
SET started_at = skiplock._time_clamp(started_at), heartbeat_at = skiplock._time_clamp(heartbeat_at)
WHERE NOT (skiplock._time_ok(started_at) AND skiplock._time_ok(heartbeat_at));

-- hosts.next_slot_at and busy_until defaulted to '-infinity' ("free"): 1970-01-01 means the same.
UPDATE skiplock.hosts
SET next_slot_at      = skiplock._time_clamp(next_slot_at),
    busy_until        = skiplock._time_clamp(busy_until),
    robots_fetched_at = skiplock._time_clamp(robots_fetched_at),
    created_at        = skiplock._time_clamp(created_at)
WHERE NOT (skiplock._time_ok(next_slot_at) AND skiplock._time_ok(busy_until) AND skiplock._time_ok(created_at))
   OR NOT skiplock._time_ok(robots_fetched_at);
ALTER TABLE skiplock.hosts
    ALTER COLUMN next_slot_at SET DEFAULT '1970-01-01 00:00:00+00',
    ALTER COLUMN busy_until SET DEFAULT '1970-01-01 00:00:00+00';

UPDATE skiplock.pages
SET first_seen   = skiplock._time_clamp(first_seen),
    last_fetched = skiplock._time_clamp(last_fetched),
    next_fetch   = skiplock._time_clamp(next_fetch),
    updated_at   = skiplock._time_clamp(updated_at)
WHERE NOT (skiplock._time_ok(first_seen) AND skiplock._time_ok(updated_at))
   OR NOT skiplock._time_ok(last_fetched) OR NOT skiplock._time_ok(next_fetch);

UPDATE skiplock.fetch_slots SET slot_at = skiplock._time_clamp(slot_at) WHERE NOT skiplock._time_ok(slot_at);
UPDATE skiplock.crawls SET created_at = skiplock._time_clamp(created_at) WHERE NOT skiplock._time_ok(created_at);
UPDATE skiplock.packs SET packed_at = skiplock._time_clamp(packed_at) WHERE NOT skiplock._time_ok(packed_at);

UPDATE skiplock.packets
SET created_at = skiplock._time_clamp(created_at), updated_at = skiplock._time_clamp(updated_at)
WHERE NOT (skiplock._time_ok(created_at) AND skiplock._time_ok(updated_at));
UPDATE skiplock.packet_events SET at = skiplock._time_clamp(at) WHERE NOT skiplock._time_ok(at);

UPDATE skiplock.periodic_jobs SET declared_at = skiplock._time_clamp(declared_at)
WHERE NOT skiplock._time_ok(declared_at);
-- A period outside the range is no real fire time (clamping two of them could even collide
-- on the primary key): the record is dropped. Only the latest period of a job matters, and a
-- bogus one far in the future would otherwise stop the job from ever being enqueued again.
DELETE FROM skiplock.periodic_runs WHERE NOT skiplock._time_ok(period_start);
UPDATE skiplock.periodic_runs SET enqueued_at = skiplock._time_clamp(enqueued_at)
WHERE NOT skiplock._time_ok(enqueued_at);

--------------------------------------------------------------------------------------------
-- 3. Constraints: no such row can be written again (one constraint per column, so a
--    violation names the column).
--------------------------------------------------------------------------------------------
ALTER TABLE skiplock.jobs
    ADD CONSTRAINT jobs_scheduled_at_range CHECK (skiplock._time_ok(scheduled_at)),
    ADD CONSTRAINT jobs_created_at_range   CHECK (skiplock._time_ok(created_at)),
    ADD CONSTRAINT jobs_attempted_at_range CHECK (skiplock._time_ok(attempted_at)),
    ADD CONSTRAINT jobs_heartbeat_at_range CHECK (skiplock._time_ok(heartbeat_at)),
    ADD CONSTRAINT jobs_finalized_at_range CHECK (skiplock._time_ok(finalized_at));
ALTER TABLE skiplock.workers
    ADD CONSTRAINT workers_started_at_range   CHECK (skiplock._time_ok(started_at)),
    ADD CONSTRAINT workers_heartbeat_at_range CHECK (skiplock._time_ok(heartbeat_at));
ALTER TABLE skiplock.hosts
    ADD CONSTRAINT hosts_next_slot_at_range      CHECK (skiplock._time_ok(next_slot_at)),
    ADD CONSTRAINT hosts_busy_until_range        CHECK (skiplock._time_ok(busy_until)),
    ADD CONSTRAINT hosts_robots_fetched_at_range CHECK (skiplock._time_ok(robots_fetched_at)),
    ADD CONSTRAINT hosts_created_at_range        CHECK (skiplock._time_ok(created_at));
ALTER TABLE skiplock.pages
    ADD CONSTRAINT pages_first_seen_range   CHECK (skiplock._time_ok(first_seen)),
    ADD CONSTRAINT pages_last_fetched_range CHECK (skiplock._time_ok(last_fetched)),
    ADD CONSTRAINT pages_next_fetch_range   CHECK (skiplock._time_ok(next_fetch)),
    ADD CONSTRAINT pages_updated_at_range   CHECK (skiplock._time_ok(updated_at));
ALTER TABLE skiplock.fetch_slots ADD CONSTRAINT fetch_slots_slot_at_range CHECK (skiplock._time_ok(slot_at));
ALTER TABLE skiplock.crawls ADD CONSTRAINT crawls_created_at_range CHECK (skiplock._time_ok(created_at));
ALTER TABLE skiplock.packs ADD CONSTRAINT packs_packed_at_range CHECK (skiplock._time_ok(packed_at));
ALTER TABLE skiplock.packets
    ADD CONSTRAINT packets_created_at_range CHECK (skiplock._time_ok(created_at)),
    ADD CONSTRAINT packets_updated_at_range CHECK (skiplock._time_ok(updated_at));
ALTER TABLE skiplock.packet_events ADD CONSTRAINT packet_events_at_range CHECK (skiplock._time_ok(at));
ALTER TABLE skiplock.periodic_jobs ADD CONSTRAINT periodic_jobs_declared_at_range CHECK (skiplock._time_ok(declared_at));
ALTER TABLE skiplock.periodic_runs
    ADD CONSTRAINT periodic_runs_period_start_range CHECK (skiplock._time_ok(period_start)),
    ADD CONSTRAINT periodic_runs_enqueued_at_range  CHECK (skiplock._time_ok(enqueued_at));

--------------------------------------------------------------------------------------------
-- 4. Coordination rows
--------------------------------------------------------------------------------------------
-- Workflow coordination locks a row of this table (`FOR UPDATE SKIP LOCKED`), never a
-- blocking advisory lock: advisory locks live in a keyspace every login shares, so any
-- login could hold them and stall the workers. Only the owner and the worker role can touch
-- these rows. `packets.processing` gates starting a packet (the concurrency count); the pack
-- workflow adds `pack:<host>` rows on demand (one pack per host at a time).
CREATE TABLE skiplock.locks (
    name  text PRIMARY KEY CHECK (name <> '' AND length(name) <= 400)
);
INSERT INTO skiplock.locks (name) VALUES ('packets.processing');

--------------------------------------------------------------------------------------------
-- 5. Limits
--------------------------------------------------------------------------------------------
-- Limits the SQL API enforces whoever calls it. Only the owner may change them (the worker
-- role reads them, the enqueuer role cannot see them); a caller cannot raise them with SET.
-- Change one with: UPDATE skiplock.settings SET value = … WHERE name = '…';
CREATE TABLE skiplock.settings (
    name   text PRIMARY KEY,
    value  bigint NOT NULL CHECK (value > 0),
    about  text NOT NULL
);
INSERT INTO skiplock.settings (name, value, about) VALUES
    ('enqueue_many.max_rows', 100000,
     'most jobs one skiplock.enqueue_many call may insert'),
    ('enqueue_many.max_bytes', 33554432,
     'most bytes of args (as JSON text, all rows together) one skiplock.enqueue_many call may insert');
