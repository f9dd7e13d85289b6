-- Settles up to $2 unresolved edges of the finished jobs $1 (what an ack left;
-- sql/api/12_flows.sql, skiplock._settle_edges): returns the jobs that may still have some (a
-- full slice was settled; NULL: none).
SELECT skiplock._settle_edges($1::bigint[], $2::integer)
