-- Whether an attempt of a job was taken away from its worker, as a column: the highest attempt
-- rescued (its worker stopped heartbeating) or cancelled while running, NULL when none was.
-- That worker may still be running it and ack it; its ack is fenced off only as long as no
-- later claim gets the same attempt number again, so a replace of the job keeps counting
-- attempts from here instead of starting at 0 (skiplock._enqueue). The statements that take an
-- attempt away write it (sql/queue/rescue.sql, skiplock.cancel, skiplock.cancel_jobs); earlier
-- releases read it from the text of the job's `errors`, which rewording a message would have
-- broken.
ALTER TABLE skiplock.jobs ADD COLUMN taken_attempt integer;

-- Rows of earlier releases: the attempts their `errors` say were taken away. The text test
-- first, so rows without such an entry (nearly all) are not unpacked.
UPDATE skiplock.jobs j
SET taken_attempt = t.attempt
FROM (SELECT j.id, max(CASE WHEN jsonb_typeof(e.x -> 'attempt') = 'number'
                            THEN (e.x ->> 'attempt')::numeric END) AS attempt
      FROM skiplock.jobs j,
           jsonb_array_elements(CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]' END) AS e(x)
      WHERE (j.errors::text LIKE '%rescued:%' OR j.errors::text LIKE '%cancelled while running%')
        AND jsonb_typeof(e.x) = 'object'
        AND (starts_with(e.x ->> 'error', 'rescued:') OR e.x ->> 'error' = 'cancelled while running')
      GROUP BY j.id) t
WHERE j.id = t.id
  AND t.attempt BETWEEN 0 AND 2147483647;
-- An entry without a readable attempt still counts as taken (the current attempt).
UPDATE skiplock.jobs j
SET taken_attempt = j.attempt
WHERE j.taken_attempt IS NULL
  AND (j.errors::text LIKE '%rescued:%' OR j.errors::text LIKE '%cancelled while running%')
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]' END) AS e(x)
              WHERE jsonb_typeof(e.x) = 'object'
                AND (starts_with(e.x ->> 'error', 'rescued:') OR e.x ->> 'error' = 'cancelled while running'));
