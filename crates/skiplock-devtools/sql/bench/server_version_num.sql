-- The server's version as a number (150000 for 15.0): pg_stat_force_next_flush needs 15.
SELECT current_setting('server_version_num')::int4
