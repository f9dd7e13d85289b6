-- Whether this connection can write: a standby in recovery cannot, nor a connection whose
-- transactions default to read-only (`default_transaction_read_only`).
SELECT pg_is_in_recovery() AS in_recovery,
       current_setting('transaction_read_only') = 'on' AS read_only
