-- Queue $1's control row, as a producer holding jobs claimed ahead needs it (no row: neither
-- limited nor paused): whether those jobs may still start (a pause, a key's limits, a limit set
-- after they were claimed, or one lowered below the jobs running now make them go back).
SELECT c.paused,
       c.concurrency IS NOT NULL AS limited,
       (c.key_concurrency IS NOT NULL OR c.key_rate IS NOT NULL) AS key_limits,
       c.concurrency IS NOT NULL
         AND (SELECT count(*) FROM skiplock.jobs j
              WHERE j.state = 'running' AND j.queue = $1) > c.concurrency AS over_limit
FROM skiplock.queues c
WHERE c.queue = $1
