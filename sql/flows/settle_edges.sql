-- Settles up to $2 unresolved edges of the finished jobs $1 (what an ack left), of the edges
-- of jobs $3 only those whose dependent's id is $4 modulo $5 (sql/api/12_flows.sql,
-- skiplock._settle_edges): returns the jobs that may still have some (a full slice was
-- settled; NULL: none).
SELECT skiplock._settle_edges($1::bigint[], $2::integer, $3::bigint[], $4::integer, $5::integer)
