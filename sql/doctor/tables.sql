-- skiplock's tables as the statistics collector sees them: live and dead tuples, the size
-- with indexes and TOAST, and how long ago each was last vacuumed and analyzed (manually or by
-- autovacuum; NULL: never since the statistics were reset), most dead tuples first.
SELECT s.relname::text AS table_name,
       s.n_live_tup AS live_tuples,
       s.n_dead_tup AS dead_tuples,
       pg_total_relation_size(s.relid) AS total_bytes,
       extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8
           AS vacuumed_seconds_ago,
       extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze))::float8
           AS analyzed_seconds_ago,
       s.autovacuum_count + s.vacuum_count AS vacuums
FROM pg_stat_user_tables s
WHERE s.schemaname = 'skiplock'
ORDER BY s.n_dead_tup DESC, s.relname
LIMIT $1
