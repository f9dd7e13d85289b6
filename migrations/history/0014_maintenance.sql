-- Maintenance: a periodic job's latest failed enqueue, on record for `skiplock periodic`
-- (docs/maintenance.md, "When an enqueue fails"). One period's enqueue can fail on its own
-- (another kind or queue holds its unique_key, say) while every other periodic job goes on;
-- the scheduler writes the failure here and tries again on its next tick, and the next
-- successful enqueue of the job clears it (skiplock.enqueue_periodic).
-- Times in range like every other (migrations/0006_hardening.sql, skiplock._time_ok).
ALTER TABLE skiplock.periodic_jobs
    ADD COLUMN last_error        text,
    ADD COLUMN last_error_at     timestamptz CHECK (skiplock._time_ok(last_error_at)),
    ADD COLUMN last_error_period timestamptz CHECK (skiplock._time_ok(last_error_period));
