-- Future-scheduled rows: in the claim index, but never due during the run.
INSERT INTO skiplock.jobs (kind, scheduled_at)
SELECT 'noop', now() + interval '1 day' FROM generate_series(1, $1)
