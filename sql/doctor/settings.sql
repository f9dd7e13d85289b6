-- The server settings the doctor judges, as this login sees them, and the connections in
-- use: client backends against max_connections less the slots reserved for superusers;
-- whether autovacuum runs at all (it also needs track_counts).
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction_session_timeout,
       current_setting('max_connections')::int4 AS max_connections,
       current_setting('superuser_reserved_connections')::int4 AS reserved_connections,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS connections,
       pg_is_in_recovery() AS in_recovery,
       current_setting('server_version') AS server_version,
       current_setting('autovacuum')::bool AS autovacuum,
       current_setting('track_counts')::bool AS track_counts
