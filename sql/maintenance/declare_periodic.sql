-- Record a periodic job as this worker declares it, so `skiplock periodic` can list it.
INSERT INTO skiplock.periodic_jobs (name, schedule, kind, queue, args, declared_by)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (name) DO UPDATE
SET schedule = EXCLUDED.schedule, kind = EXCLUDED.kind, queue = EXCLUDED.queue,
    args = EXCLUDED.args, declared_by = EXCLUDED.declared_by, declared_at = now()
