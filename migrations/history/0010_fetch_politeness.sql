-- Fetch politeness becomes the fetch queue's per-host rate limit (docs/fetch.md): fetch jobs carry
-- their host key as limit_key (skiplock._request_fetch sets it from now on). Pending fetch
-- jobs of an older release get theirs here; the host key is the normalised URL's authority,
-- as skiplock._url_host_key computes it (sql/api/20_fetch.sql).
UPDATE skiplock.jobs j
SET limit_key = substring(j.args->>'url' FROM '^[a-z]+://([^/?#]*)')
WHERE j.kind = 'fetch' AND j.queue = 'fetch' AND j.limit_key IS NULL
  AND j.state IN ('available', 'running')
  AND substring(j.args->>'url' FROM '^[a-z]+://([^/?#]*)') <> '';

-- The per-job slot reservations of the old snooze loop: nothing reads or writes them now.
-- (skiplock.hosts keeps next_slot_at and busy_until: they are dead too, but harmless, and
-- release 0.1.0's readers of that table still find them.)
DROP TABLE skiplock.fetch_slots;
