-- Forget up to $1 key holds that have passed (skiplock.key_holds): a passed hold holds nothing
-- (the enqueue reads only a hold whose `until` is still ahead), so deleting it changes no
-- decision. Rows a hold_key call holds are skipped.
WITH gone AS (
    SELECT h.queue, h.limit_key
    FROM skiplock.key_holds h
    WHERE h.until <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM skiplock.key_holds h
USING gone
WHERE h.queue = gone.queue AND h.limit_key = gone.limit_key
  AND h.until <= now()
