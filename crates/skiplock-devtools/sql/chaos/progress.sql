-- Completed chaos_record jobs so far.
SELECT count(*) FROM skiplock.jobs WHERE kind = 'chaos_record' AND state = 'completed'
