-- Forget period records older than $1 seconds, keeping each periodic job's latest (for
-- `skiplock periodic` and the first-run rule). Old periods are never enqueued again: the
-- scheduler only enqueues the current one, and never one older than the latest recorded.
DELETE FROM skiplock.periodic_runs r
WHERE r.period_start < now() - make_interval(secs => $1)
  AND EXISTS (SELECT 1 FROM skiplock.periodic_runs n
              WHERE n.name = r.name AND n.period_start > r.period_start)
