-- /metrics: what holds the vacuum horizon (docs/operations.md, "Keeping the database
-- healthy"): the age in seconds of the oldest transaction with an xid or a snapshot (client
-- sessions and WAL senders, the scrape's own excluded; prepared transactions), the largest xid
-- age any of them or a replication slot holds, and the dead tuples in skiplock's tables now.
-- Other logins' sessions count only for a login with pg_monitor (docs/roles.md).
SELECT greatest(
           (SELECT max(extract(epoch FROM now() - xact_start)) FROM pg_stat_activity
            WHERE (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
              AND backend_type IN ('client backend', 'walsender')
              AND pid <> pg_backend_pid()),
           (SELECT max(extract(epoch FROM now() - prepared)) FROM pg_prepared_xacts),
           0)::float8 AS age_seconds,
       greatest(
           (SELECT max(greatest(age(backend_xid), age(backend_xmin))) FROM pg_stat_activity
            WHERE backend_type IN ('client backend', 'walsender') AND pid <> pg_backend_pid()),
           (SELECT max(age(transaction)) FROM pg_prepared_xacts),
           (SELECT max(greatest(age(xmin), age(catalog_xmin))) FROM pg_replication_slots),
           0)::int8 AS xid_age,
       coalesce((SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE schemaname = 'skiplock'),
                0)::int8 AS dead_tuples
