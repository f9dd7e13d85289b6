-- Workers that sent a heartbeat within the last $1 seconds.
SELECT count(*) FROM skiplock.workers WHERE heartbeat_at > now() - make_interval(secs => $1)
