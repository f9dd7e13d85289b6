-- What `skiplock worker` needs that this login lacks (docs/roles.md: skiplock_worker holds it
-- all): USAGE on the schema, EXECUTE on the claim, the ack and the heartbeat (every overload),
-- UPDATE on the jobs and INSERT and UPDATE on skiplock.workers (a worker registers itself).
-- Also whether the login is an operator's (a member of skiplock_operator and not of
-- skiplock_worker: the console's and doctor's own login, never a worker's) and whether the
-- role skiplock_worker exists (a migrate without CREATEROLE makes none).
WITH roles AS (
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_worker') AS worker,
           EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'skiplock_operator') AS operator
)
SELECT current_user::text AS login,
       r.worker AS worker_role,
       (r.operator AND pg_catalog.pg_has_role(current_user, 'skiplock_operator', 'MEMBER')
        AND NOT (r.worker AND pg_catalog.pg_has_role(current_user, 'skiplock_worker', 'MEMBER')))
           AS operator_login,
       ARRAY(
           SELECT m.what FROM (
               SELECT 0 AS o, 'USAGE on schema skiplock' AS what
               WHERE NOT pg_catalog.has_schema_privilege('skiplock', 'USAGE')
               UNION ALL
               SELECT 1, format('EXECUTE on function %s', p.oid::regprocedure)
               FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = 'skiplock' AND p.proname IN ('_claim', '_ack', '_heartbeat')
                 AND NOT pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
               UNION ALL
               -- By the catalog, not by name: a name lookup in the schema needs its USAGE.
               SELECT 2, format('%s on table skiplock.%s', v.priv, v.t)
               FROM (VALUES ('jobs', 'UPDATE'), ('workers', 'INSERT'), ('workers', 'UPDATE')) v(t, priv)
               JOIN pg_catalog.pg_class c ON c.relname = v.t
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'skiplock'
               WHERE NOT pg_catalog.has_table_privilege(c.oid, v.priv)
           ) m
           ORDER BY m.o, m.what
       ) AS missing
FROM roles r
