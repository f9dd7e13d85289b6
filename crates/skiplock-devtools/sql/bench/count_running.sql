-- Every handler ran, so only acks are outstanding: count running rows (a small partial index),
-- not the available ones (the scale run has 100k future rows).
SELECT count(*) FROM skiplock.jobs WHERE state = 'running'
