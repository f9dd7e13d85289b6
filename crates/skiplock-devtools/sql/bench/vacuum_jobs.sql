-- Dead rows out and statistics fresh, so every measurement starts from the same table.
VACUUM ANALYZE skiplock.jobs
