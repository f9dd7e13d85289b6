-- The sessions that hold the vacuum horizon back: those with a transaction id (backend_xid)
-- or a snapshot (backend_xmin), oldest transaction first, the doctor's own excluded. Ages
-- in seconds on the database clock; `query` is the first line of the session's latest
-- statement. Client sessions and WAL senders only (a standby's hot_standby_feedback shows as
-- its WAL sender's xmin); a login without pg_read_all_stats (pg_monitor) sees no xmin of
-- other logins' sessions, which sql/doctor/hidden.sql counts (docs/roles.md).
SELECT pid,
       usename::text AS user_name,
       application_name,
       host(client_addr) AS client,
       state,
       backend_xid::text AS xid,
       backend_xmin::text AS xmin,
       greatest(age(backend_xid), age(backend_xmin))::int8 AS xid_age,
       coalesce(extract(epoch FROM now() - xact_start), 0)::float8 AS xact_seconds,
       coalesce(extract(epoch FROM now() - state_change), 0)::float8 AS state_seconds,
       left(split_part(query, E'\n', 1), 200) AS query
FROM pg_stat_activity
WHERE (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
  AND backend_type IN ('client backend', 'walsender')
  AND pid <> pg_backend_pid()
ORDER BY xact_start NULLS LAST, pid
LIMIT $1
