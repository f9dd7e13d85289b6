-- The pack workflow's schema as releases up to SQL API 7 left it: one row per host that has
-- been packed, so operators see in psql when a host was last packed, from how many pages, and
-- where the artifact is. Installed by a program built with the `pack` feature; a database
-- that earlier releases migrated has it already.

CREATE TABLE skiplock.packs (
    host         text NOT NULL,
    -- When the last successful pack's upload finished.
    packed_at    timestamptz NOT NULL,
    -- Pages in the artifact and its size in bytes.
    pages        bigint NOT NULL,
    bytes        bigint NOT NULL,
    -- Object key inside the store, and the store it went to (local directory or s3:// URL).
    object_key   text NOT NULL,
    store        text NOT NULL,
    -- The do-the-packing job that made it, and how long building + uploading took.
    job_id       bigint,
    duration_ms  bigint,
    -- Successful packs of this host so far.
    pack_count   bigint NOT NULL DEFAULT 1,
    CONSTRAINT packs_pkey PRIMARY KEY (host),
    CONSTRAINT packs_packed_at_range CHECK (skiplock._time_ok(packed_at))
);
