-- Packing: one row per host that has been packed, so operators can see in psql when a host
-- was last packed, from how many pages, and where the artifact is.

CREATE TABLE skiplock.packs (
    host         text PRIMARY KEY,
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
    pack_count   bigint NOT NULL DEFAULT 1
);
