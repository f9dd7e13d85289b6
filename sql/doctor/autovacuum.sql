-- Whether autovacuum keeps up with each of skiplock's tables: its dead tuples against the
-- threshold past which autovacuum vacuums it (autovacuum_vacuum_threshold +
-- autovacuum_vacuum_scale_factor × reltuples, each the table's own storage parameter if set,
-- else the server's; reltuples -1, never analyzed, counts as 0, as autovacuum counts it),
-- whether autovacuum may vacuum it at all (the table's autovacuum_enabled), and seconds since
-- its latest vacuum of either kind (NULL: none recorded). Most dead tuples first.
SELECT c.relname::text AS table_name,
       s.n_dead_tup AS dead_tuples,
       (coalesce(o.threshold, current_setting('autovacuum_vacuum_threshold')::float8)
        + coalesce(o.scale_factor, current_setting('autovacuum_vacuum_scale_factor')::float8)
          * greatest(c.reltuples, 0))::int8 AS threshold,
       coalesce(o.enabled, true) AS enabled,
       extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8
           AS vacuumed_seconds_ago
FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
CROSS JOIN LATERAL (
    SELECT max(option_value) FILTER (WHERE option_name = 'autovacuum_enabled')::bool AS enabled,
           max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_threshold')::float8 AS threshold,
           max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_scale_factor')::float8 AS scale_factor
    FROM pg_options_to_table(c.reloptions)
) o
WHERE s.schemaname = 'skiplock'
ORDER BY s.n_dead_tup DESC, c.relname
LIMIT $1
