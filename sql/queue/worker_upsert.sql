-- Register or refresh this worker process in skiplock.workers, and read the SQL API the
-- schema records in the same round trip: a running worker stops once another release has
-- migrated the schema (src/worker/heartbeat.rs). No row: none recorded.
WITH registered AS (
    INSERT INTO skiplock.workers (id, host, pid, queues, kinds)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (id) DO UPDATE
    SET heartbeat_at = now(), queues = EXCLUDED.queues, kinds = EXCLUDED.kinds
)
SELECT api_version, api_hash, migrated_by FROM skiplock.schema_info
