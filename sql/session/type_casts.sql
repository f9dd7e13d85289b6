-- Behind a transaction-pooling PgBouncer (src/store/session.rs, `learn_types`): one
-- `NULL::schema.type` per type a statement may return that the driver does not know by
-- itself: the enums, domains, ranges and composite types (not table rows) of every schema but
-- the system's, and their arrays, as the select list of a statement whose description teaches
-- the driver them all. Names quoted by the server.
SELECT string_agg(format('NULL::%I.%I', n.nspname, t.typname), ', ' ORDER BY t.oid)
FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
LEFT JOIN pg_catalog.pg_class c ON c.oid = coalesce(e.typrelid, t.typrelid)
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_%'
  AND coalesce(e.typtype, t.typtype) IN ('e', 'd', 'r', 'm', 'c')
  AND (c.oid IS NULL OR c.relkind = 'c')
