-- The store layer (src/store/mod.rs): enum types the SQL API answers with instead of strings, and
-- the record of which SQL API version `skiplock migrate` installed.

-- How skiplock._packet_start answered (it returned 'started' / 'busy' / 'stale:<state>' /
-- 'duplicate:<job>' before): the outcome, plus the packet's state and the owning job where
-- they explain it (skiplock.packet_start_result).
CREATE TYPE skiplock.packet_start_outcome AS ENUM ('started', 'busy', 'stale', 'duplicate');

CREATE TYPE skiplock.packet_start_result AS (
    outcome skiplock.packet_start_outcome,
    -- stale: the state the packet is in (NULL: it no longer exists).
    state skiplock.packet_state,
    -- duplicate: the live job that owns the packet.
    owner_job bigint
);

-- How skiplock._packet_finish answered (the new state, or 'lost:<state>' before): whether
-- the outcome was recorded, and the packet's state (the new one, or the one it was found in
-- when it had been taken away; NULL: it no longer exists).
CREATE TYPE skiplock.packet_finish_result AS (
    recorded boolean,
    state skiplock.packet_state
);

-- The SQL API installed by the last `skiplock migrate`: one row. Workers and CLI commands
-- read it at start and refuse to run against another version (src/store/schema.rs). A
-- database without the row was migrated before versions were recorded (version 0).
CREATE TABLE skiplock.schema_info (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    api_version integer NOT NULL CHECK (api_version > 0),
    api_hash text NOT NULL,
    migrated_by text NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now() CHECK (skiplock._time_ok(migrated_at))
);
