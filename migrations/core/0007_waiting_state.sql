-- Flows (docs/flows.md): a job enqueued with dependencies waits in this state, outside every
-- claim index, until each job it depends on has finished as it needs them to
-- (skiplock._settle). Its own migration: Postgres lets a new enum value be used only after
-- the transaction that added it commits (0008 uses it).
ALTER TYPE skiplock.job_state ADD VALUE IF NOT EXISTS 'waiting';
