-- Running jobs whose heartbeat is older than $1 seconds (the rescue window): the rescuer of a
-- live worker moves such a job back within one window, so one still here means no worker is
-- rescuing. Oldest heartbeat first; only the running rows are read.
SELECT id, kind, queue, attempted_by,
       extract(epoch FROM now() - coalesce(heartbeat_at, attempted_at, created_at))::float8
           AS heartbeat_seconds,
       extract(epoch FROM now() - coalesce(attempted_at, created_at))::float8 AS running_seconds
FROM skiplock.jobs
WHERE state = 'running'
  AND coalesce(heartbeat_at, attempted_at, created_at) < now() - make_interval(secs => $1)
ORDER BY coalesce(heartbeat_at, attempted_at, created_at), id
LIMIT $2
