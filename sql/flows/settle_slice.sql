-- One slice of what acks left to settle: the unresolved edges of finished jobs $1, each from
-- its cursor in $2 on, at most $3 in all (sql/api/12_flows.sql, skiplock._settle_slice);
-- returns the jobs that may have edges left and their cursors.
SELECT s.left_deps, s.left_afters FROM skiplock._settle_slice($1::bigint[], $2::bigint[], $3::integer) s
