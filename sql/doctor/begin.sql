-- `skiplock doctor` reads only: every check runs in its own read-only transaction, under a
-- statement_timeout ($1, milliseconds as text) set for that transaction alone, so one slow
-- count on a big database is cut off and reported instead of holding the others
-- (docs/operations.md, "Keeping the database healthy").
SELECT set_config('transaction_read_only', 'on', true), set_config('statement_timeout', $1, true)
