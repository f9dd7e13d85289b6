-- Change the per-key concurrency ($2: whether, $3: to what) and/or the key rate ($4: whether,
-- $5 starts per $6 seconds) of queue $1, keeping the other (sql/api/15_control.sql).
SELECT skiplock.change_key_limit($1, $2, $3, $4, $5, $6::float8 * interval '1 second')
