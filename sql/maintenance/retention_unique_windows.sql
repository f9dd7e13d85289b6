-- Forget up to $1 `unique_for` windows that ended more than an hour ago
-- (skiplock.unique_windows): an ended window refuses nothing (skiplock._enqueue_outcome looks
-- only at the window holding its transaction's now(), so the hour spares a transaction that
-- began before the window ended), and deleting it changes no decision. Rows an enqueue holds
-- are skipped.
WITH gone AS (
    SELECT w.kind, w.queue, w.scope, w.key, w.window_start
    FROM skiplock.unique_windows w
    WHERE w.window_end <= now() - interval '1 hour'
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM skiplock.unique_windows w
USING gone
WHERE (w.kind, w.queue, w.scope, w.key, w.window_start)
    = (gone.kind, gone.queue, gone.scope, gone.key, gone.window_start)
