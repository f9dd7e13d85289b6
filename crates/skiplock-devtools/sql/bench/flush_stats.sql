-- Makes this connection write its pending statistics (its commits) when it goes idle, which
-- happens before the server answers ReadyForQuery: once this returns, they are counted.
SELECT pg_stat_force_next_flush()
