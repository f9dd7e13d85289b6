-- Replication slots: a slot keeps the WAL from its restart_lsn on, and its xmin (physical,
-- with hot_standby_feedback) or catalog_xmin (logical) holds the vacuum horizon, whether a
-- consumer is connected (`active`) or not. Retained WAL in bytes against the current WAL
-- position (NULL for a slot that never reserved WAL).
SELECT slot_name::text AS slot_name,
       slot_type,
       database::text AS database,
       active,
       xmin::text AS xmin,
       catalog_xmin::text AS catalog_xmin,
       greatest(age(xmin), age(catalog_xmin))::int8 AS xid_age,
       pg_wal_lsn_diff(
           CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
           restart_lsn)::int8 AS retained_wal_bytes
FROM pg_replication_slots
ORDER BY active, slot_name
LIMIT $1
