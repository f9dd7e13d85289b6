-- Fresh statistics after a fill.
ANALYZE skiplock.jobs
