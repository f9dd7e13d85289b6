-- A worker session's first statement (src/db/session.rs): sets its statement and lock
-- timeouts (milliseconds; zero for none) and tells whether it can write (a standby in
-- recovery cannot, nor a session whose transactions default to read-only). The timeouts are
-- set here, not in the start-up packet's `options`, which connection poolers such as
-- PgBouncer refuse (docs/operations.md, "Behind PgBouncer").
SELECT pg_is_in_recovery() AS in_recovery,
       current_setting('transaction_read_only') = 'on' AS read_only
FROM (SELECT set_config('statement_timeout', $1::text, false),
             set_config('lock_timeout', $2::text, false)) AS limits
