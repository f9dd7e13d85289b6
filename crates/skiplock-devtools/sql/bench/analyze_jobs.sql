-- Statistics for the freshly filled table (the claim's plan depends on them).
ANALYZE skiplock.jobs
