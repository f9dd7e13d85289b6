-- After a drain: when its first job was claimed (epoch seconds, the database's clock).
SELECT extract(epoch FROM min(attempted_at))::float8
FROM skiplock.jobs
WHERE queue = 'default' AND kind = 'noop'
