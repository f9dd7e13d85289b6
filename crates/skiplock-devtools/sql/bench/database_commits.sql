-- Committed transactions of one database so far (read-only ones included), from the
-- cumulative statistics; read from a connection to another database, so reading adds nothing.
SELECT coalesce(xact_commit, 0)::int8 FROM pg_stat_database WHERE datname = $1
