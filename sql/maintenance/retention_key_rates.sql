-- Forget up to $1 per-key rate records whose time has passed: a key's record with tat <= now()
-- allows the next start at once and moves tat to now() + period / rate, exactly as no record
-- does (skiplock._claim_limited), so deleting it changes no decision. Without this the table
-- keeps one row per key ever limited (a crawler's every host). Rows a claim holds are
-- skipped (the next run takes them).
WITH gone AS (
    SELECT kr.queue, kr.limit_key
    FROM skiplock.key_rates kr
    WHERE kr.tat <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM skiplock.key_rates kr
USING gone
WHERE kr.queue = gone.queue AND kr.limit_key = gone.limit_key
  AND kr.tat <= now()
