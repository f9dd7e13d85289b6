-- Fresh statistics and no dead rows before a run (cannot run in a transaction).
VACUUM ANALYZE skiplock.jobs
