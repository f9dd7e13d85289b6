-- Jobs still running: only acks are outstanding once every handler ran (a small partial
-- index; the available ones may be the scale run's 100k future rows).
SELECT count(*) FROM skiplock.jobs WHERE state = 'running'
