-- Forget worker rows silent for longer than $1 seconds (much longer than the rescue timeout).
DELETE FROM skiplock.workers WHERE heartbeat_at < now() - make_interval(secs => $1)
