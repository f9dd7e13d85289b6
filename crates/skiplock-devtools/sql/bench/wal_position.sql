-- The server's WAL insert position in bytes. Server-wide: whatever else the server does
-- between two readings counts too.
SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8
