-- Other logins' sessions this login may not see the details of (no pg_read_all_stats, which
-- pg_monitor includes): pg_stat_activity shows their user but no state, xmin or query, so
-- whatever they hold back cannot be named.
SELECT count(*) AS sessions
FROM pg_stat_activity
WHERE usename IS NOT NULL AND backend_type IS NULL
