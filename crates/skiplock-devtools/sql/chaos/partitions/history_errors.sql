-- The attempts whose handler reported an error (not a rescue), for the history checker.
SELECT j.id AS job_id, (e->>'attempt')::int AS attempt
FROM skiplock.jobs j, jsonb_array_elements(j.errors) e
WHERE e->>'error' NOT LIKE 'rescued:%' AND e ? 'attempt'
