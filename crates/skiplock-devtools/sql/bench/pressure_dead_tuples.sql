-- Dead tuples of the tables of schema $1, from the statistics (they lag by up to a second).
SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = $1
