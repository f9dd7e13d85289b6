-- Prepared transactions (two-phase commit): each holds its locks and the vacuum horizon until
-- someone runs COMMIT PREPARED or ROLLBACK PREPARED with its gid; nothing ends one on its own.
SELECT gid,
       owner::text AS owner,
       database::text AS database,
       transaction::text AS xid,
       age(transaction)::int8 AS xid_age,
       extract(epoch FROM now() - prepared)::float8 AS seconds
FROM pg_prepared_xacts
ORDER BY prepared
LIMIT $1
